"""A real Slurm for tests: munged, slurmctld and slurmd (Debian 12's 22.05),
each started here with its own folder, ports on loopback and sockets, and
stopped by pid. One node, `gsnode`, whose GPUs are the fake host's device
nodes (gres.conf written by `gpuslice slurm gres`), with gpuslice's SPANK
plugin in its plugstack.conf.

The daemons run as root (SlurmUser=root), as on a node; no cgroup plugin
(proctrack/linuxproc, task/none), so nothing of the host's cgroups is touched.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from daemons import _stop as stop_process

REPO = Path(__file__).resolve().parent.parent
PLUGIN_DIR = REPO / "native" / "slurm"
NODE = "gsnode"
CPUS = 8  # config_overrides: Slurm believes it, so CPUs never queue a test's jobs


class SlurmError(RuntimeError):
    """A daemon did not come up, or a job did not reach a state; the message
    holds what the logs said."""


def build_plugin() -> Path:
    subprocess.run(["make", "-s", "-C", str(PLUGIN_DIR)], check=True)
    return PLUGIN_DIR / "build" / "spank_gpuslice.so"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def version() -> str:
    return subprocess.run(["slurmctld", "-V"], capture_output=True, text=True,
                          check=True).stdout.strip()


class Cluster:
    """munged + slurmctld + slurmd in a short folder under /tmp (sockets are
    limited to 108 bytes)."""

    def __init__(self, gres_conf: str, plugstack: str, client_env: Dict[str, str],
                 oci_conf: str = "") -> None:
        """oci_conf: its text, {dir} standing for this cluster's folder (runc's
        state goes there)."""
        self.dir = Path(tempfile.mkdtemp(prefix="gs-slurm-", dir="/tmp"))
        self.procs: List["subprocess.Popen[bytes]"] = []
        d = self.dir
        for sub in ("ctld", "spool", "out"):
            (d / sub).mkdir()
        (d / "out").chmod(0o777)
        (d / "munge.key").write_bytes(os.urandom(1024))
        (d / "munge.key").chmod(0o400)
        (d / "gres.conf").write_text(gres_conf)
        (d / "plugstack.conf").write_text(plugstack)
        if oci_conf:
            (d / "oci.conf").write_text(oci_conf.replace("{dir}", str(d)))
        host = socket.gethostname().split(".")[0]
        conf = {
            "ClusterName": "gpuslice", "SlurmctldHost": f"{host}(127.0.0.1)",
            "SlurmctldPort": str(_free_port()), "SlurmdPort": str(_free_port()),
            "SlurmUser": "root", "SlurmdUser": "root",
            "AuthType": "auth/munge", "CredType": "cred/munge",
            "AuthInfo": f"socket={d}/munge.sock",
            "StateSaveLocation": f"{d}/ctld", "SlurmdSpoolDir": f"{d}/spool",
            "SlurmctldPidFile": f"{d}/slurmctld.pid", "SlurmdPidFile": f"{d}/slurmd.pid",
            "SlurmctldLogFile": f"{d}/slurmctld.log", "SlurmdLogFile": f"{d}/slurmd.log",
            "ProctrackType": "proctrack/linuxproc", "TaskPlugin": "task/none",
            "JobAcctGatherType": "jobacct_gather/none",
            "AccountingStorageType": "accounting_storage/none", "JobCompType": "jobcomp/none",
            "SchedulerType": "sched/builtin", "SelectType": "select/cons_tres",
            "SelectTypeParameters": "CR_Core", "GresTypes": "gpu,shard",
            "PlugStackConfig": f"{d}/plugstack.conf", "MpiDefault": "none",
            "ReturnToService": "2", "SlurmdParameters": "config_overrides",
            "SlurmdDebug": "verbose", "KillWait": "2", "MinJobAge": "3600",
        }
        lines = [f"{k}={v}" for k, v in conf.items()]
        gres = "gpu:1,shard:8"
        for line in gres_conf.splitlines():
            if line.startswith("# slurm.conf: "):
                gres = line.split("Gres=", 1)[1]
        lines.append(f"NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={CPUS} "
                     f"RealMemory=1000 Gres={gres} State=UNKNOWN")
        lines.append(f"PartitionName=main Nodes={NODE} Default=YES MaxTime=INFINITE State=UP")
        (d / "slurm.conf").write_text("\n".join(lines) + "\n")
        self.env = dict(client_env, SLURM_CONF=str(d / "slurm.conf"))
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _spawn(self, argv: Sequence[str], log: str) -> "subprocess.Popen[bytes]":
        out = open(self.dir / log, "wb")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=self.env)
        out.close()
        self.procs.append(p)
        return p

    def _start(self) -> None:
        d = self.dir
        munged = self._spawn(["munged", "-F", "-f", f"--socket={d}/munge.sock",
                              f"--key-file={d}/munge.key", f"--pid-file={d}/munged.pid",
                              f"--log-file={d}/munged.log", f"--seed-file={d}/munge.seed"],
                             "munged.out")
        self._wait(lambda: (d / "munge.sock").exists(), munged, "munged.log", 30)
        conf = str(d / "slurm.conf")
        ctld = self._spawn(["slurmctld", "-D", "-f", conf], "slurmctld.out")
        self._wait(lambda: self._ok(["scontrol", "ping"]), ctld, "slurmctld.log", 60)
        slurmd = self._spawn(["slurmd", "-D", "-N", NODE, "-f", conf], "slurmd.out")
        self._wait(lambda: self.node_state() in ("IDLE", "MIXED", "ALLOCATED"), slurmd,
                   "slurmd.log", 60)

    def _ok(self, argv: Sequence[str]) -> bool:
        return subprocess.run(argv, env=self.env, capture_output=True).returncode == 0

    def _wait(self, ready, proc: "subprocess.Popen[bytes]", log: str, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if ready():
                return
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        raise SlurmError(f"{proc.args[0]} did not come up (exit {proc.poll()}):\n"
                         + self.tail(log))

    def tail(self, log: str, size: int = 3000) -> str:
        path = self.dir / log
        return path.read_text(errors="replace")[-size:] if path.exists() else "(no log)"

    def node_state(self) -> str:
        res = subprocess.run(["sinfo", "-h", "-N", "-n", NODE, "-o", "%T"], env=self.env,
                             capture_output=True, text=True)
        return res.stdout.strip().upper().rstrip("*")

    def run(self, argv: Sequence[str], timeout: float = 120,
            env: Optional[Dict[str, str]] = None) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(argv, env=dict(self.env, **(env or {})), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def sbatch(self, script: str, *args: str, env: Optional[Dict[str, str]] = None) -> int:
        """Submit script (a shell script's text), with env over the client's; its
        job id. Output in out/<id>.out."""
        path = self.dir / "out" / f"script-{time.monotonic_ns()}.sh"
        path.write_text("#!/bin/sh\n" + script)
        res = self.run(["sbatch", "--parsable", "-o", f"{self.dir}/out/%j.out", *args, str(path)],
                       env=env)
        if res.returncode != 0:
            raise SlurmError(f"sbatch failed: {res.stderr}")
        return int(res.stdout.strip().split(";")[0])

    def output(self, job: int) -> str:
        path = self.dir / "out" / f"{job}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def job(self, job: int) -> Dict[str, str]:
        """scontrol's fields of the job (JobState, Reason, ExitCode...)."""
        res = self.run(["scontrol", "show", "job", "-o", str(job)])
        fields: Dict[str, str] = {}
        for word in res.stdout.split():
            key, _, value = word.partition("=")
            fields.setdefault(key, value)
        return fields

    def wait_state(self, job: int, states: Sequence[str], seconds: float = 90) -> Dict[str, str]:
        end = time.monotonic() + seconds
        fields: Dict[str, str] = {}
        while time.monotonic() < end:
            fields = self.job(job)
            if fields.get("JobState") in states:
                return fields
            time.sleep(0.2)
        raise SlurmError(f"job {job} never reached {'/'.join(states)}: {fields.get('JobState')} "
                         f"({fields.get('Reason')});\n{self.tail('slurmd.log')}")

    def stop(self) -> None:
        """Cancel what is left, then stop the daemons, newest first, by pid."""
        if self.procs and self.procs[-1].poll() is None and len(self.procs) == 3:
            self.run(["scancel", "--full", "-u", "root"], timeout=30)
            end = time.monotonic() + 30
            while time.monotonic() < end:
                res = self.run(["squeue", "-h", "-t", "running,completing"], timeout=30)
                if res.returncode != 0 or not res.stdout.strip():
                    break
                time.sleep(0.3)
        for p in reversed(self.procs):
            stop_process(p)
        self.procs = []
        shutil.rmtree(self.dir, ignore_errors=True)
