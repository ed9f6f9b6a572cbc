"""`gpuslice slurm ...`: what the SPANK plugin (native/slurm) runs in
slurmstepd, and the gres.conf helper an administrator runs."""
from __future__ import annotations

import sys
from typing import Optional

import click

from ocihook.accountant import AccountantError
from ocihook.clitext import examples
from ocihook.config import Config
from ocihook.messages import EXIT_NO, error as fail


def _config() -> Config:
    """The configuration `gpuslice --config` (the group above this one) loaded."""
    cfg: Config = click.get_current_context().find_root().obj.config
    return cfg


@click.group("slurm", epilog=examples("gpuslice slurm gres --write /etc/slurm/gres.conf"))
def slurm_group() -> None:
    """Slurm jobs with --gres=shard:k: their slices (docs/slurm.md)."""


@slurm_group.command("admit", epilog=examples(
    "gpuslice slurm admit --job 12 --step batch --uid 1000 --gid 1000 --pid 4242 "
    "--cards 0 --shards 4 --user alice"))
@click.option("--job", type=click.IntRange(1), required=True, help="Slurm job id")
@click.option("--step", required=True, help="step id as slurmstepd names it (batch, 0, ...)")
@click.option("--uid", type=click.IntRange(0), required=True, help="the job's user id")
@click.option("--gid", type=click.IntRange(0), required=True, help="the job's group id")
@click.option("--pid", type=click.IntRange(1), required=True, help="the step's slurmstepd")
@click.option("--cards", required=True, help="the node's GPU indices Slurm gave the step (SLURM_STEP_GPUS)")
@click.option("--shards", type=click.IntRange(1), required=True,
              help="SLURM_SHARDS_ON_NODE: the job's shards on this node")
@click.option("--user", default="", help="the job's user name, shown by status")
def admit_cmd(job: int, step: str, uid: int, gid: int, pid: int, cards: str, shards: int,
              user: str) -> None:
    """Admit a step's slice; print its env.

    The env its processes get, as NAME=value lines. Refused: one line, exit 1."""
    from ocihook.slurm import job as jobs

    cfg = _config()
    st = jobs.Step(job, step, uid, gid, pid, cards, shards, user)
    try:
        sl = jobs.admit(cfg, st)
    except jobs.JobError as e:
        if not e.refused:
            fail(str(e))
        print(f"gpuslice: {e}", file=sys.stderr)
        sys.exit(EXIT_NO)
    except AccountantError as e:
        fail(str(e))
    for key, value in jobs.env(cfg, st, sl).items():
        click.echo(f"{key}={value}")


@slurm_group.command("release", epilog=examples("gpuslice slurm release --job 12"))
@click.option("--job", type=click.IntRange(1), required=True, help="Slurm job id")
@click.option("--pid", type=click.IntRange(1), default=None,
              help="release only if this slurmstepd holds the slice")
def release_cmd(job: int, pid: Optional[int]) -> None:
    """Give back a job's slice.

    The plugin runs it at a step's end and in the job's epilog."""
    from ocihook.slurm import job as jobs

    cfg = _config()
    try:
        if jobs.release(cfg, job, pid):
            click.echo(f"released {jobs.container_id(job)}")
    except (jobs.JobError, AccountantError) as e:
        fail(str(e))


@slurm_group.command("gres", epilog=examples("gpuslice slurm gres --node node1",
                                              "gpuslice slurm gres --check /etc/slurm/gres.conf"))
@click.option("--node", default=None, help="NodeName= to put on each line")
@click.option("--write", "write_path", metavar="FILE", default=None,
              help="put the lines in FILE (between gpuslice's markers)")
@click.option("--check", "check_path", metavar="FILE", default=None,
              help="exit 1 with one line if FILE's lines differ from gpuslice's")
def gres_cmd(node: Optional[str], write_path: Optional[str], check_path: Optional[str]) -> None:
    """Print, write or check gres.conf lines.

    A gpu and a shard line per card, from the CDI spec and slurm_shards."""
    from ocihook.slurm import gres

    cfg = _config()
    if write_path and check_path:
        fail("--write and --check go one at a time; run one, then the other")
    try:
        if check_path:
            problem = gres.check(cfg, check_path, node)
            if problem:
                print(f"gpuslice: {problem}", file=sys.stderr)
                sys.exit(EXIT_NO)
            click.echo(f"{check_path}: matches ({gres.node_gres(cfg)} in slurm.conf)")
        elif write_path:
            gres.write(cfg, write_path, node)
            click.echo(f"wrote {write_path}; slurm.conf's NodeName line needs {gres.node_gres(cfg)}")
        else:
            click.echo("\n".join(gres.block(cfg, node)))
    except (gres.GresError, OSError) as e:
        fail(str(e))


@slurm_group.command("bind", context_settings={"ignore_unknown_options": True},
                     epilog=examples("gpuslice slurm bind --bundle %b --job %j -- runc run "
                                      "%n.%u.%j.%s.%t -b %b"))
@click.option("--bundle", required=True, metavar="DIR", help="the bundle Slurm made (%b)")
@click.option("--job", type=click.IntRange(1), required=True, help="Slurm job id (%j)")
@click.argument("runtime", nargs=-1, type=click.UNPROCESSED, required=True)
def bind_cmd(bundle: str, job: int, runtime: "tuple[str, ...]") -> None:
    """Bind the shim into a step's container, run it.

    oci.conf's RunTimeRun: the shim, the card files and the job's folder are
    bound into the bundle's container and the step's env added, then RUNTIME
    (runc run ...) is run."""
    import os

    from ocihook.slurm import container

    cfg = _config()
    try:
        container.bind(cfg, bundle, job)
    except (container.BindError, OSError) as e:
        fail(str(e))
    try:
        os.execvp(runtime[0], list(runtime))
    except OSError as e:
        fail(f"{runtime[0]}: cannot run the container runtime ({e.strerror}); check "
             "RunTimeRun in oci.conf")
