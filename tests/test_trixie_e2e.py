"""End to end with Debian 13's runtimes (tests/trixie_root.py): Docker 26 and
Podman 5.4 read our spec themselves (CDI), containerd 1.7 runs
gpuslice-runtime (`ctr run --runc-binary`) and takes the CRI block `gpuslice
setup containerd` writes; `gpuslice setup docker` reads dockerd 26's version
and dockerd takes the daemon.json it writes. runc 1.1.15 under all of them;
the real hook and accountant, fake cards, a spec from `gpuslice cdi generate`.

gpuslice itself runs on the host (Debian 12's Python), the runtimes and their
clients in the root; the spec, the configuration, the database and the
built hook are host paths that the root sees at the same place.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

from daemons import Containerd, Dockerd, daemon_env
from fakehost import NVIDIA_MAJOR, Host, fake_gpu
from podman_harness import Podman
from test_podman_e2e import PROBE as CDI_PROBE, SHIM_MARKER
from test_runtime_e2e import PROBE as RUNTIME_PROBE, SHIM_MARKER as NODE_SHIM_MARKER
from test_runtime_e2e import Node, probed, wait_until
from test_setup import toml_loads
from trixie_root import RootError, TrixieRoot

KIND = "gpuslice.io/gpu"
# The CDI probe, and the placement the hook writes for a card-less slice.
PROBE = CDI_PROBE + 'echo "placement $(cat /run/gpuslice/placement 2>/dev/null)"\n'
CARD_MIB = 8192  # a 0-4g and a 4g-30 fill it
REPO = Path(__file__).resolve().parent.parent


def seen(stdout: str) -> Tuple[List[str], Dict[str, str], Dict[str, str]]:
    """PROBE's lines, its device nodes (path: 'major:minor' or 'absent') and env."""
    lines = stdout.splitlines()
    nodes = dict(line.split(" ", 2)[1:] for line in lines if line.startswith("node "))
    env = dict(line[4:].split("=", 1) for line in lines if line.startswith("env "))
    return lines, nodes, env


def assert_slice(stdout: str, memory: str, cores: str = "", placed: bool = False) -> None:
    """What a container with a slice of card 0 sees; placed: a card-less
    slice, whose card the hook chose and wrote down for it."""
    lines, nodes, env = seen(stdout)
    assert nodes["/dev/nvidia0"] == f"{NVIDIA_MAJOR:x}:0", lines
    assert nodes["/dev/nvidiactl"] == f"{NVIDIA_MAJOR:x}:ff"
    assert nodes["/dev/nvidia-uvm"] != "absent"
    assert env["GPUSLICE_MEMORY_LIMIT"] == memory
    assert env.get("GPUSLICE_CORE_LIMIT", "") == cores
    assert env["LD_PRELOAD"] == "/usr/lib/gpuslice/libgpuslice.so"
    assert f"shim {SHIM_MARKER}" in lines
    assert not [line for line in lines if line.startswith("file") and line.endswith("absent")]
    assert "smi fake nvidia-smi" in lines and "libs read-only" in lines
    assert "cards writable" in lines
    assert f"placement {'0 ' + fake_gpu(0)['uuid'] if placed else ''}" in lines


def assert_untouched(stdout: str) -> None:
    """What a container that asked for no device sees: nothing of ours."""
    lines, nodes, env = seen(stdout)
    assert set(nodes.values()) == {"absent"}, lines
    assert not [k for k in env if k.startswith("GPUSLICE") or k == "LD_PRELOAD"], env
    assert not [line for line in lines if line.startswith(("shim", "cards"))], lines
    assert "placement " in lines
    assert [line for line in lines if line.startswith("file")] == \
        [line for line in lines if line.startswith("file") and line.endswith("absent")]


def holders(host: Host) -> List[Tuple[str, str]]:
    """(container id, device) of each reservation, from `gpuslice status`."""
    res = host.run("status", "--json")
    assert res.returncode == 0, res.stderr
    return sorted((c["id"], c["device"]) for card in json.loads(res.stdout)["cards"]
                  for c in card["containers"])


def refusal(device: str) -> str:
    return (f"{device}: card 0 ({fake_gpu(0)['uuid']}) has 0 MiB free of {CARD_MIB} MiB, "
            "4096 MiB asked; stop a container on it or ask for less")


def make_host(tmp: Path, driver_root: Path, spec_dir: Path) -> Host:
    (tmp / "host").mkdir()
    host = Host(tmp / "host", driver_root, [fake_gpu(0, memory_mib=CARD_MIB)],
                spec_dir=spec_dir)
    host.shim.write_text(SHIM_MARKER)
    host.use_real_hook()
    res = host.run("cdi", "generate")
    assert res.returncode == 0, res.stderr
    return host


def engines_path(trixie: TrixieRoot, tmp: Path) -> str:
    """A PATH on which `gpuslice setup` finds the root's dockerd and containerd."""
    folder = tmp / "engines"
    for program in ("dockerd", "containerd"):
        trixie.launcher(folder, program)
    return f"{folder}:{os.environ['PATH']}"


# -- Docker 26 ----------------------------------------------------------------------

@pytest.fixture
def docker_host(tmp_path: Path, driver_root: Path, trixie: TrixieRoot) -> Host:
    return make_host(tmp_path, driver_root, tmp_path / "cdi")


@pytest.fixture
def docker(tmp_path: Path, docker_host: Host, trixie: TrixieRoot) -> Iterator[Dockerd]:
    """dockerd 26 with the daemon.json `gpuslice setup docker` wrote for the
    version it read from that dockerd."""
    daemon_json = tmp_path / "docker" / "daemon.json"
    daemon_json.parent.mkdir()
    daemon_json.write_text('{"log-level": "warn"}\n')
    res = docker_host.run("setup", "docker", "--daemon-json", str(daemon_json),
                          path=engines_path(trixie, tmp_path))
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines()[0] == (
        "gpuslice: docker 26.1: CDI is opt-in before 28.2; enabling it (features.cdi); "
        f"adding {docker_host.spec_dir} to cdi-spec-dirs")
    d = Dockerd(tmp_path / "docker", daemon_env({}), {}, daemon_json=daemon_json,
                prefix=trixie.prefix)
    try:
        yield d
    finally:
        d.stop()


def docker_run(docker: Dockerd, cmd: List[str], *options: str) -> subprocess.CompletedProcess:
    return docker.run(cmd, extra=["--pull", "never", *options])


def test_setup_docker_reads_dockerd_26_and_dockerd_takes_its_file(docker: Dockerd,
                                                                   docker_host: Host) -> None:
    assert json.loads(docker.daemon_json.read_text()) == {
        "log-level": "warn", "features": {"cdi": True},
        "cdi-spec-dirs": ["/etc/cdi", "/var/run/cdi", str(docker_host.spec_dir)]}
    info = docker.docker(["info", "--format", "{{json .CDISpecDirs}} {{.ServerVersion}}"])
    assert info.returncode == 0, info.stderr
    dirs, version = info.stdout.split()
    assert json.loads(dirs) == ["/etc/cdi", "/var/run/cdi", str(docker_host.spec_dir)]
    assert version.startswith("26.1."), version


def test_docker_26_slices_admission_and_status(docker: Dockerd, docker_host: Host) -> None:
    res = docker_run(docker, ["sh", "-c", PROBE], "--rm", "--device", f"{KIND}=0-4g")
    assert res.returncode == 0, res.stderr
    assert_slice(res.stdout, "4096MiB")
    assert wait_until(lambda: holders(docker_host) == [])  # --rm: poststop gave it back
    res = docker_run(docker, ["sh", "-c", PROBE], "--rm", "--device", f"{KIND}=4g-30")
    assert res.returncode == 0, res.stderr
    assert_slice(res.stdout, "4096MiB", "30", placed=True)
    # Two running fill the card: the books name them, a third is refused.
    held = {}
    for device in ("0-4g", "4g-30"):
        run = docker_run(docker, ["sleep", "600"], "--detach", "--device", f"{KIND}={device}")
        assert run.returncode == 0, run.stderr
        held[device] = run.stdout.strip()
    assert holders(docker_host) == sorted((cid, dev) for dev, cid in held.items())
    third = docker_run(docker, ["true"], "--rm", "--device", f"{KIND}=0-4g")
    assert third.returncode != 0
    assert refusal("0-4g") in third.stderr, third.stderr
    assert docker.docker(["rm", "-f", held["0-4g"]]).returncode == 0
    assert wait_until(lambda: holders(docker_host) == [(held["4g-30"], "4g-30")])
    again = docker_run(docker, ["true"], "--rm", "--device", f"{KIND}=0-4g")
    assert again.returncode == 0, again.stderr


def test_docker_26_container_without_device_untouched(docker: Dockerd,
                                                      docker_host: Host) -> None:
    res = docker_run(docker, ["sh", "-c", PROBE], "--rm")
    assert res.returncode == 0, res.stderr
    assert_untouched(res.stdout)
    assert holders(docker_host) == []


# -- Podman 5.4 ---------------------------------------------------------------------

@pytest.fixture
def podman5(tmp_path: Path, trixie: TrixieRoot) -> Iterator[Podman]:
    p = Podman(tmp_path / "podman", prefix=trixie.prefix, network_backend="netavark")
    p.extra_env["PODMAN_IGNORE_CGROUPSV1_WARNING"] = "1"  # the hosts here have v1
    try:
        yield p
    finally:
        p.cleanup()


def test_podman_5_slices_admission_and_status(podman5: Podman, tmp_path: Path,
                                              driver_root: Path) -> None:
    host = make_host(tmp_path, driver_root, podman5.cdi_dir)
    version = podman5.podman(["version", "--format", "{{.Client.Version}}"])
    assert version.stdout.strip().startswith("5.4."), (version.stdout, version.stderr)
    # First, while the root file system is fresh: --rootfs runs leave the
    # mount points of our files in it.
    res = podman5.run(["sh", "-c", PROBE])
    assert res.returncode == 0, res.stderr
    assert_untouched(res.stdout)
    res = podman5.run(["sh", "-c", PROBE], devices=[f"{KIND}=0-4g"])
    assert res.returncode == 0, res.stderr
    assert_slice(res.stdout, "4096MiB")
    res = podman5.run(["sh", "-c", PROBE], devices=[f"{KIND}=4g-30"])
    assert res.returncode == 0, res.stderr
    assert_slice(res.stdout, "4096MiB", "30", placed=True)
    assert holders(host) == []
    held = {}
    for device in ("0-4g", "4g-30"):
        run = podman5.run(["sleep", "600"], devices=[f"{KIND}={device}"],
                          extra_args=["--detach"])
        assert run.returncode == 0, run.stderr
        held[device] = run.stdout.strip()
    assert holders(host) == sorted((cid, dev) for dev, cid in held.items())
    third = podman5.run(["true"], devices=[f"{KIND}=0-4g"])
    assert third.returncode != 0
    assert refusal("0-4g") in third.stderr, third.stderr
    stop = podman5.podman(["rm", "--force", "--time", "0", held["0-4g"]], timeout=120)
    assert stop.returncode == 0, stop.stderr
    assert wait_until(lambda: holders(host) == [(held["4g-30"], "4g-30")])
    again = podman5.run(["true"], devices=[f"{KIND}=0-4g"])
    assert again.returncode == 0, again.stderr


# -- containerd 1.7 -----------------------------------------------------------------

@pytest.fixture
def node(tmp_path: Path, driver_root: Path, trixie: TrixieRoot) -> Node:
    """test_runtime_e2e's Node: its env is how gpuslice-runtime finds the
    Python of ours it runs and the real runtime. The root has each at the path
    that env names: our scripts run by the root's python3, and its runc."""
    n = Node(tmp_path, driver_root)
    assert trixie.place_scripts(n.env, REPO), f"no script of ours named in {n.env}"
    runc = n.after.read_text().split("exec ", 1)[1].split()[0]
    assert (trixie.path / runc.lstrip("/")).is_file(), \
        f"the copier runs {runc}, which the {trixie.path} root lacks"
    return n


def test_containerd_17_ctr_through_gpuslice_runtime(node: Node, trixie: TrixieRoot) -> None:
    c = Containerd(node.tmp / "containerd", node.env, prefix=trixie.prefix)
    try:
        res = c.run("probe", ["sh", "-c", RUNTIME_PROBE], node.before, env=["GPUSLICE=0-4g"])
        assert res.returncode == 0, res.stderr
        assert probed(res.stdout) == [
            "node /dev/nvidia0", "node /dev/nvidiactl", "GPUSLICE_MEMORY_LIMIT=4096MiB",
            NODE_SHIM_MARKER, "cards"]
        assert wait_until(lambda: node.holders() == [])
        res = c.run("held", ["sleep", "600"], node.before, env=["GPUSLICE=1-4g-30"],
                    detach=True)
        assert res.returncode == 0, res.stderr
        assert wait_until(lambda: node.holders() == ["1-4g-30"])
        assert c.ctr(["task", "kill", "-s", "KILL", "held"]).returncode == 0
        assert wait_until(lambda: "RUNNING" not in c.ctr(["task", "ls"]).stdout)
        c.ctr(["task", "delete", "held"])
        c.ctr(["container", "delete", "held"])
        assert wait_until(lambda: node.holders() == [])
        # Without a request: config.json as containerd 1.7 wrote it.
        res = c.run("plain", ["true"], node.before)
        assert res.returncode == 0, res.stderr
        assert node.configs("before")[-1] == node.configs("after")[-1]
    finally:
        c.stop()


def test_setup_containerd_reads_17_and_containerd_takes_its_cri_block(
        tmp_path: Path, driver_root: Path, trixie: TrixieRoot) -> None:
    host = make_host(tmp_path, driver_root, tmp_path / "cdi")
    config = tmp_path / "containerd.toml"
    res = host.run("setup", "containerd", "--config", str(config),
                   path=engines_path(trixie, tmp_path))
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines()[0] == (
        "gpuslice: containerd 1.7: reads CDI through CRI (CDI is off by default before 2.0); "
        'setting enable_cdi in [plugins."io.containerd.grpc.v1.cri"]')
    dirs = ["/etc/cdi", "/var/run/cdi", str(host.spec_dir)]
    c = Containerd(tmp_path / "containerd", daemon_env({}), prefix=trixie.prefix,
                   config=config)
    try:
        plugins = c.ctr(["plugins", "ls"])
        assert plugins.returncode == 0, plugins.stderr
        [cri] = [line.split() for line in plugins.stdout.splitlines()
                 if line.split()[:2] == ["io.containerd.grpc.v1", "cri"]]
        assert cri[-1] == "ok", (plugins.stdout, c.log.read_text()[-2000:])
        dump = trixie.run("containerd", "--config", str(config), "config", "dump")
        assert dump.returncode == 0, dump.stderr
        cri_config = toml_loads(dump.stdout)["plugins"]["io.containerd.grpc.v1.cri"]
        assert cri_config["enable_cdi"] is True
        assert cri_config["cdi_spec_dirs"] == dirs
    finally:
        c.stop()


# -- the root itself ----------------------------------------------------------------

def test_the_roots_mounts_stay_out_of_the_hosts_table(trixie: TrixieRoot) -> None:
    assert str(trixie.path) not in Path("/proc/self/mountinfo").read_text()
    inside = subprocess.run(trixie.enter("cat", "/proc/self/mountinfo"), capture_output=True,
                            text=True, timeout=60)
    assert inside.returncode == 0, inside.stderr
    mounted = {line.split()[4] for line in inside.stdout.splitlines()}
    assert {str(trixie.path / p) for p in ("proc", "sys", "dev", "run", "tmp")} <= mounted
    # The shared folders at their own paths: the outermost of them, since a
    # checkout under /tmp (a CI clone) is seen through /tmp's mount.
    assert str(trixie.path) in mounted and trixie.shared
    assert {f"{trixie.path}{folder}" for folder in trixie.shared} <= mounted
    assert any(folder == REPO or folder in REPO.parents for folder in trixie.shared)


def test_an_unreachable_mirror_fails_in_one_line(tmp_path: Path) -> None:
    root = TrixieRoot(tmp_path / "root")
    with pytest.raises(RootError) as e:
        root.build([], mirror="http://127.0.0.1:9/debian")
    root.close()
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("debootstrap trixie from http://127.0.0.1:9/debian failed "
                                   "(exit 1): "), str(e.value)
    assert "the machine must reach http://127.0.0.1:9/debian (log: " in str(e.value)


def test_a_missing_debootstrap_fails_in_one_line(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RootError) as e:
        TrixieRoot(tmp_path / "root").build([])
    assert str(e.value) == ("debootstrap not found: apt-get install debootstrap util-linux "
                            "(./install.sh --with-tests installs them)")
