"""gpuslice-runtime end to end: real dockerd 20.10 (`docker run --runtime`),
real containerd 1.6 (`ctr run --runc-binary`) and real Podman (its own CDI
against gpuslice-runtime's), runc underneath, fake cards, a spec from `gpuslice cdi
generate`, the real hook and accountant.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

from daemons import Containerd, Dockerd, daemon_env
from fakehost import Host, build_runtime, fake_gpu, runtime_cache_env
from podman_harness import podman_fixture

podman = podman_fixture()
SHIM_MARKER = "not a real shim: marks the mount"
PROBE = ("for n in /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl; do [ -c $n ] && echo node $n; "
         "done; env | grep -E '^GPUSLICE_(MEMORY|CORE)_LIMIT='; cat /usr/lib/gpuslice/libgpuslice.so; echo; "
         "cat /run/gpuslice/placement 2>/dev/null; [ -d /run/gpuslice/cards ] && echo cards")


class Node:
    """A host with two 16 GiB fake cards, its spec generated, and the env that
    points gpuslice-runtime at it (through the daemon that runs the runtime)."""

    def __init__(self, tmp: Path, driver_root: Path) -> None:
        (tmp / "host").mkdir()
        self.tmp = tmp
        self.host = Host(tmp / "host", driver_root, [fake_gpu(0, memory_mib=16384),
                                                     fake_gpu(1, memory_mib=16384)])
        self.host.shim.write_text(SHIM_MARKER)
        self.host.use_real_hook()
        res = self.host.run("cdi", "generate")
        assert res.returncode == 0, res.stderr
        self.runtime = build_runtime()
        # Docker and containerd run the runtime; a copier on each side of it
        # records config.json as the caller wrote it and as runc gets it.
        self.seen = tmp / "seen"
        self.seen.mkdir()
        self.before = self._copier("before", str(self.runtime))
        self.after = self._copier("after", shutil.which("runc") or "runc")
        self.env = daemon_env({"GPUSLICE_CONFIG": str(self.host.config),
                               "GPUSLICE_RUNTIME_BINARY": str(self.after),
                               **runtime_cache_env(tmp)})

    def _copier(self, name: str, then: str) -> Path:
        script = self.tmp / f"copy-{name}"
        script.write_text(
            "#!/bin/sh\n"
            'b=""; prev=""; cmd=""\n'
            'for a in "$@"; do\n'
            '  case "$prev" in --bundle|-b) b=$a ;; esac\n'
            '  case "$a" in create|run) [ -z "$cmd" ] && cmd=$a ;; esac\n'
            '  prev=$a\n'
            "done\n"
            f'if [ -n "$cmd" ]; then [ -n "$b" ] || b=$(pwd); '
            f'cp "$b/config.json" "{self.seen}/{name}-$(date +%s%N).json"; fi\n'
            f'exec {then} "$@"\n')
        script.chmod(0o755)
        return script

    def configs(self, name: str) -> List[bytes]:
        return [p.read_bytes() for p in sorted(self.seen.glob(f"{name}-*.json"))]

    def status(self) -> Dict:
        res = self.host.run("status", "--json")
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    def holders(self) -> List[str]:
        return [c["device"] for card in self.status()["cards"] for c in card["containers"]]


@pytest.fixture
def node(tmp_path: Path, driver_root: Path) -> Node:
    return Node(tmp_path, driver_root)


def dockerd_set_up(node: Node, env: Dict[str, str]) -> Dockerd:
    """dockerd with gpuslice-runtime registered as a user does: `gpuslice setup
    docker` writes daemon.json (runtime_path: the copier in front of
    gpuslice-runtime; the real runtime passed by runtimeArgs)."""
    (node.tmp / "docker").mkdir()
    daemon_json = node.tmp / "docker" / "daemon.json"
    daemon_json.write_text('{"log-level": "warn"}\n')
    node.host.config.write_text(node.host.config.read_text() + f"runtime_path: {node.before}\n")
    res = node.host.run("setup", "docker", "--daemon-json", str(daemon_json),
                        "--real-runtime", str(node.after))
    assert res.returncode == 0, res.stderr
    assert json.loads(daemon_json.read_text())["runtimes"]["gpuslice"] == {
        "path": str(node.before), "runtimeArgs": ["--gpuslice-runtime", str(node.after)]}
    return Dockerd(node.tmp / "docker", env, {}, daemon_json=daemon_json)


@pytest.fixture
def docker(node: Node) -> Iterator[Dockerd]:
    d = dockerd_set_up(node, node.env)
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def containerd(node: Node) -> Iterator[Containerd]:
    c = Containerd(node.tmp / "containerd", node.env)
    try:
        yield c
    finally:
        c.stop()


def probed(out: str) -> List[str]:
    return [line for line in out.splitlines() if line]


def wait_until(check, seconds: float = 30) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.1)
    return False


def test_docker_slice_and_status(node: Node, docker: Dockerd) -> None:
    res = docker.run(["sh", "-c", PROBE], runtime="gpuslice", env=["GPUSLICE=0-4g"],
                     extra=["--rm"])
    assert res.returncode == 0, res.stderr
    assert probed(res.stdout) == [
        "node /dev/nvidia0", "node /dev/nvidiactl", "GPUSLICE_MEMORY_LIMIT=4096MiB",
        SHIM_MARKER, "cards"]
    assert wait_until(lambda: node.holders() == [])  # --rm: poststop gave it back
    # While it runs, the accountant holds its slice; not after. Its name is
    # Docker's (config.v2.json under docker_root: Docker writes none where
    # the hook reads).
    node.host.config.write_text(node.host.config.read_text()
                                + f"docker_root: {node.tmp / 'docker' / 'data'}\n")
    run = docker.run(["sleep", "600"], runtime="gpuslice", env=["GPUSLICE=4g-30"],
                     extra=["--detach", "--name", "web"])
    assert run.returncode == 0, run.stderr
    cid = run.stdout.strip()
    card0 = node.status()["cards"][0]
    assert [(c["id"], c["name"], c["device"], c["memory_mib"], c["cores"])
            for c in card0["containers"]] == [(cid, "web", "4g-30", 4096, 30)]
    assert f"  {cid[:12]} (web)  4g-30" in node.host.run("status").stdout
    assert docker.docker(["rm", "-f", cid]).returncode == 0
    assert wait_until(lambda: node.holders() == [])


def test_docker_without_request_is_untouched(node: Node, docker: Dockerd) -> None:
    res = docker.run(["true"], runtime="gpuslice", extra=["--rm"])
    assert res.returncode == 0, res.stderr
    before, after = node.configs("before"), node.configs("after")
    assert len(before) == len(after) == 1
    assert before[0] == after[0]  # byte for byte
    assert hashlib.sha256(before[0]).hexdigest() == hashlib.sha256(after[0]).hexdigest()
    assert node.holders() == []


def test_docker_unknown_device_names_what_exists(node: Node, docker: Dockerd) -> None:
    res = docker.run(["true"], runtime="gpuslice", env=["GPUSLICE=0-99g"], extra=["--rm"])
    assert res.returncode != 0
    assert "gpuslice-runtime: error: unknown CDI device gpuslice.io/gpu=0-99g; " \
        "gpuslice.io/gpu offers: 0, 0-4g, 0-4g-30, 1, 1-4g, " in res.stderr, res.stderr
    assert node.configs("after") == []  # runc never ran


def test_containerd_slice_and_status(node: Node, containerd: Containerd) -> None:
    res = containerd.run("probe", ["sh", "-c", PROBE], node.before, env=["GPUSLICE=1-4g"])
    assert res.returncode == 0, res.stderr
    assert probed(res.stdout) == [
        "node /dev/nvidia1", "node /dev/nvidiactl", "GPUSLICE_MEMORY_LIMIT=4096MiB",
        SHIM_MARKER, "cards"]
    assert wait_until(lambda: node.holders() == [])
    res = containerd.run("held", ["sleep", "600"], node.before, env=["GPUSLICE=4g"],
                         detach=True)
    assert res.returncode == 0, res.stderr
    assert wait_until(lambda: node.holders() == ["4g"])
    assert containerd.ctr(["task", "kill", "-s", "KILL", "held"]).returncode == 0
    assert wait_until(lambda: containerd.ctr(["task", "ls"]).stdout.count("held") == 0 or
                      "STOPPED" in containerd.ctr(["task", "ls"]).stdout)
    containerd.ctr(["task", "delete", "held"])
    containerd.ctr(["container", "delete", "held"])
    assert wait_until(lambda: node.holders() == [])
    # Without a request: config.json as containerd wrote it.
    res = containerd.run("plain", ["true"], node.before)
    assert res.returncode == 0, res.stderr
    assert node.configs("before")[-1] == node.configs("after")[-1]


def _normalised(doc: Dict, cid: str) -> Dict:
    """A config.json with what differs between two runs of one command made equal."""
    text = json.dumps(doc).replace(cid, "CID").replace(cid[:12], "CID12")
    out = json.loads(text)
    env = [e for e in out["process"]["env"] if not e.startswith("GPUSLICE=")]
    # Podman orders its own variables as a map iterates (at random); the
    # spec's come after them, in the order the edits give.
    first = next(i for i, e in enumerate(env) if e.startswith("GPUSLICE_DRIVER_VERSION="))
    out["process"]["env"] = sorted(env[:first]) + env[first:]
    for key in ("gpuslice.io/applied", "io.podman.annotations.cid-file",
                "io.kubernetes.cri-o.Created"):  # ours; a file per run; the time
        out.get("annotations", {}).pop(key, None)
    return out


def test_our_applier_gives_what_podman_gives(node: Node, podman) -> None:
    """The same spec and device, injected by Podman's CDI and by gpuslice-runtime:
    the two config.json that runc gets are the same (container ids aside)."""
    for spec in node.host.spec_dir.glob("gpuslice.*"):
        shutil.copy(spec, podman.cdi_dir / spec.name)
    podman.runtime = str(node.after)
    cdi = podman.run(["true"], devices=["gpuslice.io/gpu=0-4g-30"],
                     extra_args=["--hostname", "h"])
    assert cdi.returncode == 0, cdi.stderr
    # Podman gives the runtime a clean environment: a script sets ours.
    wrapper = node.tmp / "runtime-with-env"
    wrapper.write_text("#!/bin/sh\n" + "".join(f"export {k}='{v}'\n" for k, v in node.env.items())
                       + f'exec {node.runtime} "$@"\n')
    wrapper.chmod(0o755)
    podman.runtime = str(wrapper)
    ours = podman.run(["true"], env={"GPUSLICE": "0-4g-30"}, extra_args=["--hostname", "h"])
    assert ours.returncode == 0, ours.stderr
    [a, b] = [json.loads(x) for x in node.configs("after")]
    a, b = _normalised(a, cdi.container_id), _normalised(b, ours.container_id)
    for key in sorted(set(a) | set(b)):
        assert a.get(key) == b.get(key), (key, a.get(key), b.get(key))
