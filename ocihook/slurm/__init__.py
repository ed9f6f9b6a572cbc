"""Slurm: jobs that ask for --gres=shard:k get a hard slice of the card.

The SPANK plugin (native/slurm) runs in every job step's slurmstepd and asks
this package, through `gpuslice slurm admit|release`, for the step's slice:
shards.py turns k of a card's N shards into memory and a compute cap,
job.py admits it in the node's accountant (through gpuslice-hook, as every
container's admission) and says the env that puts the step's processes under
the shim; gres.py writes and checks the node's gres.conf lines, so that Slurm
counts the shards gpuslice sizes. docs/slurm.md tells the whole story.
"""
