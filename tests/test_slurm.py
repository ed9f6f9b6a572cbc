"""Slurm jobs with --gres=shard:k under gpuslice, on a real Slurm (Debian 12's
22.05: munged, slurmctld and slurmd started here, tests/slurm_harness.py):
the SPANK plugin (native/slurm) admits each job's slice in the node's
accountant and preloads the shim, so a job's CUDA processes (tests/shim's
cuprog on the fake driver) see k/8 of the fake 16 GiB card and get
CUDA_ERROR_OUT_OF_MEMORY past it; Slurm queues a job the shards do not
cover; a slice goes back at the job's end, at scancel, and through gc when
the step's slurmstepd is killed; a card a container holds refuses the job
with one line in its output. sbatch and srun both.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List

import pytest

import ci_log
from exporter_node import Exporter, samples
from fakehost import Host, fake_gpu
from slurm_harness import Cluster, build_plugin, version
from test_hook import GIB_MIB

REPO = Path(__file__).resolve().parent.parent
CUPROG = REPO / "tests" / "shim" / "build-plain" / "cuprog"
SHIM = REPO / "native" / "shim" / "build" / "libgpuslice.so"
OOM = 2  # CUDA_ERROR_OUT_OF_MEMORY


class Node:
    """The fake host gpuslice sees (one 16 GiB card, 8 shards) and the Slurm
    that runs jobs on it."""

    def __init__(self, tmp: Path, driver_root: Path, fakedriver: Path) -> None:
        for target, folder in (("", "native/shim"), ("VARIANT=plain", "tests/shim")):
            subprocess.run(["make", "-s", "-C", str(REPO / folder), *target.split()], check=True)
        (tmp / "host").mkdir()
        self.fakedriver = fakedriver
        self.host = Host(tmp / "host", driver_root, [fake_gpu(0, memory_mib=16 * GIB_MIB)],
                         extra_config="slurm_shards: 8\n")
        self.host.use_real_hook()
        self.host.config.write_text(self.host.config.read_text().replace(
            f"shim_path: {self.host.shim}", f"shim_path: {SHIM}"))
        assert self.run("cdi", "generate").returncode == 0
        gres = self.run("slurm", "gres", "--node", "gsnode")
        assert gres.returncode == 0, gres.stderr
        gpuslice = shutil.which("gpuslice")
        assert gpuslice, "gpuslice is not on PATH: install.sh --with-tests installs it"
        plugstack = (f"required {build_plugin()} gpuslice={gpuslice} "
                     f"config={self.host.config}\n")
        env = dict(os.environ, GPUSLICE_FAKE_GPUS=str(self.host.gpus_json),
                   LD_LIBRARY_PATH=str(fakedriver), GPUSLICE_CONTEXT_RESERVE="0")
        # srun --container: runc, through `gpuslice slurm bind` (docs/slurm.md).
        run = "runc --root={dir}/runc"
        ident = "%n.%u.%j.%s.%t"
        oci = (f'RunTimeQuery="{run} state {ident}"\n'
               f'RunTimeKill="{run} kill -a {ident}"\n'
               f'RunTimeDelete="{run} delete --force {ident}"\n'
               f'RunTimeRun="{gpuslice} --config {self.host.config} slurm bind --bundle %b '
               f'--job %j -- {run} run {ident} -b %b"\n')
        self.slurm = Cluster(gres.stdout, plugstack, env, oci_conf=oci)

    def run(self, *args: str) -> "subprocess.CompletedProcess[str]":
        return self.host.run(*args)

    def env(self) -> Dict[str, str]:
        """What `gpuslice` needs here (tests/exporter_node.py's Exporter runs it so)."""
        env = dict(os.environ, GPUSLICE_FAKE_GPUS=str(self.host.gpus_json),
                   GPUSLICE_CONFIG=str(self.host.config))
        env.pop("LD_LIBRARY_PATH", None)
        return env

    def hook(self, *args: str) -> "subprocess.CompletedProcess[str]":
        db, state = self.host.tmp / "state.db", self.host.tmp / "state"
        return subprocess.run([str(self.host.hook), *args, "--database", str(db),
                               "--state-dir", str(state)], capture_output=True, text=True,
                              timeout=60)

    def held(self) -> Dict[str, int]:
        """container id -> MiB it holds, from the accountant."""
        from ocihook.accountant import Accountant

        a = Accountant.read_only(str(self.host.tmp / "state.db"))
        try:
            return {r.container_id: r.memory_mib for u in a.usage() for r in u.reservations}
        finally:
            a.close()

    def rows(self) -> Dict[str, object]:
        from ocihook.accountant import Accountant

        a = Accountant.read_only(str(self.host.tmp / "state.db"))
        try:
            return {r.container_id: r for u in a.usage() for r in u.reservations}
        finally:
            a.close()

    def wait_until(self, ok: Callable[[], bool], what: str, seconds: float = 60) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if ok():
                return
            time.sleep(0.2)
        raise AssertionError(f"{what}: held {self.held()};\n{self.slurm.tail('slurmd.log')}")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, driver_root: Path,
         fakedriver: Path) -> Iterator[Node]:
    n = Node(tmp_path_factory.mktemp("slurm"), driver_root, fakedriver)
    ci_log.keep("Slurm (tests/test_slurm.py)", version())
    print(version())
    try:
        yield n
    finally:
        n.slurm.stop()


def holding(gate: Path, *ops: str) -> str:
    """A job script line: cuprog runs ops on card 0, then holds its memory
    until gate exists (bounded: 120 s)."""
    return (f"i=0; while [ ! -e {gate} ] && [ $i -lt 600 ]; do sleep 0.2; i=$((i+1)); done | "
            f"{CUPROG} direct init pctx 0 {' '.join(ops)} hold\n")


def test_slurm_version_is_logged(node: Node) -> None:
    assert version().startswith("slurm"), version()


def test_two_half_card_jobs_and_a_third_that_waits(node: Node, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    a = node.slurm.sbatch(holding(gate, "info", "alloc", "1G"), "--gres=shard:4")
    b = node.slurm.sbatch(holding(gate, "info", "alloc", "1G"), "--gres=shard:4")
    for job in (a, b):
        node.slurm.wait_state(job, ["RUNNING"])
    node.wait_until(lambda: all("held" in node.slurm.output(j) for j in (a, b)),
                    "the two jobs never held their memory")
    half = 8 * 1024 ** 3
    for job in (a, b):
        out = node.slurm.output(job)
        info = [line.split() for line in out.splitlines() if line.startswith("info ")]
        assert info and info[0][1] == "0" and int(info[0][3]) == half, out
    assert node.held() == {f"slurm-{a}": 8192, f"slurm-{b}": 8192}
    views_show_the_jobs(node, [a, b])
    c = node.slurm.sbatch(holding(gate, "info"), "--gres=shard:4")
    node.slurm.wait_state(c, ["PENDING"])
    # Slurm's own word: it waits for resources (the shards), not for a pass.
    node.wait_until(lambda: node.slurm.job(c).get("Reason") == "Resources",
                    f"job {c} is not waiting for resources: {node.slurm.job(c)}")
    assert node.slurm.job(c)["JobState"] == "PENDING"
    assert f"slurm-{c}" not in node.held()
    gate.touch()
    for job in (a, b):
        node.slurm.wait_state(job, ["COMPLETED"])
    node.slurm.wait_state(c, ["COMPLETED"])
    assert "info 0" in node.slurm.output(c)
    node.wait_until(lambda: not node.held(), "the slices were not released at the jobs' end")


def views_show_the_jobs(node: Node, jobs: List[int]) -> None:
    """status, top and the exporter name each job (slurm-<id>), its step and
    user (the name "<job>.<step> <user>"), and the memory its cuprog holds."""
    status = node.run("status")
    assert status.returncode == 0, status.stderr
    top = node.run("top", "--once")
    assert top.returncode == 0, top.stderr
    exporter = Exporter(node)  # type: ignore[arg-type]
    try:
        metrics = exporter.scrape()
    finally:
        exporter.stop()
    for job in jobs:
        assert f"slurm-{job}" in status.stdout and f"{job}.batch root" in status.stdout, \
            status.stdout
        assert f"slurm-{job}" in top.stdout, top.stdout
        used = [v for labels, v in samples(metrics)["gpuslice_container_memory_used_bytes"]
                if labels.get("container_id") == f"slurm-{job}"]
        assert used and used[0] >= 1 << 30, metrics
        assert f'name="{job}.batch root"' in metrics, metrics


def test_allocation_past_the_slice_is_out_of_memory_srun(node: Node) -> None:
    res = node.slurm.run(["srun", "--gres=shard:2", str(CUPROG), "direct", "init", "pctx", "0",
                          "info", "alloc", "3G", "alloc", "2G"])
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[:2] == ["init 0", "pctx 0"], res.stdout
    assert lines[2].split()[3] == str(4 * 1024 ** 3), res.stdout  # 2 of 8 shards: 4 GiB
    assert lines[3:] == ["alloc 0", f"alloc {OOM}"], res.stdout
    node.wait_until(lambda: not node.held(), "srun's slice was not released")


def container_bundle(node: Node, folder: Path) -> Path:
    """An OCI bundle for srun --container: the host's /usr (and its links) and
    what cuprog needs, bound read-only at the same paths; not the shim and not
    gpuslice's state dir: `gpuslice slurm bind` must add those."""
    rootfs = folder / "rootfs"
    rootfs.mkdir(parents=True)
    for name in ("bin", "lib", "lib64", "sbin"):
        if os.path.islink(f"/{name}"):
            os.symlink(os.readlink(f"/{name}"), rootfs / name)
    binds = ["/usr", str(CUPROG.parent), str(node.fakedriver), str(node.host.gpus_json)]
    binds += [f"/{n}" for n in ("bin", "lib", "lib64", "sbin")
              if os.path.isdir(f"/{n}") and not os.path.islink(f"/{n}")]
    config = {
        "ociVersion": "1.0.2",
        "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["/bin/true"],
                    "env": ["PATH=/usr/bin:/bin"], "cwd": "/"},
        "root": {"path": "rootfs", "readonly": False},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}]
        + [{"destination": b, "source": b, "type": "bind", "options": ["rbind", "ro"]}
           for b in binds],
        "linux": {"namespaces": [{"type": t} for t in ("pid", "mount", "ipc", "uts")]},
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_srun_container_step_is_under_the_shim_with_the_jobs_region(node: Node,
                                                                     tmp_path: Path) -> None:
    bundle = container_bundle(node, tmp_path / "bundle")
    res = node.slurm.run(["srun", "--gres=shard:2", "--container", str(bundle), str(CUPROG),
                          "direct", "init", "pctx", "0", "info", "alloc", "3G", "alloc", "2G"])
    assert res.returncode == 0, res.stderr + node.slurm.tail("slurmd.log")
    lines = res.stdout.splitlines()
    assert lines[2].split()[3] == str(4 * 1024 ** 3), res.stdout  # the job's 2 of 8 shards
    assert lines[3:] == ["alloc 0", f"alloc {OOM}"], res.stdout
    node.wait_until(lambda: not node.held(), "the container step's slice was not released")


def test_batch_script_with_srun_steps_shares_the_jobs_slice(node: Node) -> None:
    job = node.slurm.sbatch(f"srun {CUPROG} direct init pctx 0 info\n"
                            f"{CUPROG} direct init pctx 0 alloc 3G\n", "--gres=shard:2")
    node.slurm.wait_state(job, ["COMPLETED"])
    out = node.slurm.output(job)
    # The srun step and the batch step both under the job's 4 GiB, and the job
    # booked once: its two steps together are not refused.
    info = [line.split() for line in out.splitlines() if line.startswith("info ")]
    assert info and info[0][3] == str(4 * 1024 ** 3), out
    assert "alloc 0" in out, out
    node.wait_until(lambda: not node.held(), "the batch job's slice was not released")


def test_a_job_without_shards_cannot_claim_them_through_its_env(node: Node) -> None:
    """The env is the user's: a job that exports Slurm's shard variables but
    was given no shards must not be admitted (Slurm sets or clears them for
    the step itself)."""
    fake = {"SLURM_SHARDS_ON_NODE": "8", "SLURM_STEP_GPUS": "0", "SLURM_JOB_GPUS": "0",
            "CUDA_VISIBLE_DEVICES": "0"}
    job = node.slurm.sbatch("env | grep -c GPUSLICE_MEMORY_LIMIT\n", env=fake)
    node.slurm.wait_state(job, ["COMPLETED", "FAILED"])
    res = node.slurm.run(["srun", "env"], env=fake)
    assert res.returncode == 0, res.stderr
    assert "GPUSLICE_MEMORY_LIMIT" not in res.stdout, res.stdout
    assert node.slurm.output(job).splitlines()[0] == "0", node.slurm.output(job)
    assert not node.held()


def test_scancel_releases_the_slice(node: Node, tmp_path: Path) -> None:
    job = node.slurm.sbatch(holding(tmp_path / "never", "alloc", "1G"), "--gres=shard:4")
    node.slurm.wait_state(job, ["RUNNING"])
    node.wait_until(lambda: f"slurm-{job}" in node.held(), "the job was never admitted")
    assert node.slurm.run(["scancel", str(job)]).returncode == 0
    node.slurm.wait_state(job, ["CANCELLED"])
    node.wait_until(lambda: f"slurm-{job}" not in node.held(), "scancel left the slice held")


def kill_the_step(node: Node, job: int) -> int:
    """SIGKILL to the slurmstepd that holds job's slice (its pid is the row's)
    and to its tasks (our job's shell, its loop and cuprog, orphaned by it)."""
    # The row is made before the tasks start: wait for cuprog to hold its memory.
    node.wait_until(lambda: "held" in node.slurm.output(job), "the job's cuprog never held")
    stepd = node.rows()[f"slurm-{job}"].pid  # type: ignore[attr-defined]
    assert isinstance(stepd, int) and stepd > 1
    assert open(f"/proc/{stepd}/comm").read().strip() == "slurmstepd"
    tasks = descendants(stepd)
    assert tasks
    os.kill(stepd, signal.SIGKILL)
    for pid in tasks:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    node.wait_until(lambda: not os.path.exists(f"/proc/{stepd}"), "slurmstepd survived")
    return stepd


def test_killed_slurmstepd_is_reclaimed_by_gc(node: Node, tmp_path: Path) -> None:
    job = node.slurm.sbatch(holding(tmp_path / "never", "alloc", "1G"), "--gres=shard:4")
    node.slurm.wait_state(job, ["RUNNING"])
    kill_the_step(node, job)
    assert f"slurm-{job}" in node.held()  # nothing ran at its end
    gc = node.run("gc")
    assert gc.returncode == 0, gc.stderr
    assert f"slurm-{job}" not in node.held(), gc.stdout
    assert f"reclaimed slurm-{job}" in gc.stdout, gc.stdout
    node.slurm.run(["scancel", str(job)])


def test_the_jobs_epilog_releases_what_a_killed_step_left(node: Node, tmp_path: Path) -> None:
    job = node.slurm.sbatch(holding(tmp_path / "never", "alloc", "1G"), "--gres=shard:4")
    node.slurm.wait_state(job, ["RUNNING"])
    kill_the_step(node, job)
    assert f"slurm-{job}" in node.held()
    assert node.slurm.run(["scancel", str(job)]).returncode == 0
    # No gc and no other admission here: only the plugin's job epilog can.
    node.wait_until(lambda: f"slurm-{job}" not in node.held(),
                    "the job's epilog did not release the slice")


def descendants(root: int) -> List[int]:
    """The pids under root (from /proc's parent links), each > 1: never a
    pid that kill(2) would take for a group or for every process."""
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child > 1 and child not in out:
                out.append(child)
                todo.append(child)
    return out


def test_job_refused_when_a_container_holds_the_card(node: Node) -> None:
    uuid = fake_gpu(0)["uuid"]
    # A container's 14 GiB slice: 2 GiB are left, the job's 4 GiB do not fit.
    held = node.hook("admit", "--id", "ctr-holds-the-card", "--device", "0-14g", "--card", uuid,
                     "--memory-mib", "14336", "--pid", str(os.getpid()))
    assert held.returncode == 0, held.stderr
    try:
        job = node.slurm.sbatch(f"{CUPROG} direct init pctx 0 info\n", "--gres=shard:2")
        state = node.slurm.wait_state(job, ["FAILED", "COMPLETED"])
        assert state["JobState"] == "FAILED", state
        out = node.slurm.output(job).strip().splitlines()
        assert len(out) == 1, out
        assert out[0].startswith(f"gpuslice: job {job} (2 of 8 shards, 4096 MiB): "), out
        assert "card 0" in out[0] and "2048 MiB" in out[0], out
        srun = node.slurm.run(["srun", "--gres=shard:2", str(CUPROG), "direct", "init"])
        assert srun.returncode != 0
        assert "gpuslice: job " in srun.stderr and "card 0" in srun.stderr, srun.stderr
        assert "init 0" not in srun.stdout
    finally:
        assert node.hook("release", "--id", "ctr-holds-the-card").returncode == 0
    assert not node.held()
