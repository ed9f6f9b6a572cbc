"""What gpuslice-runtime injects for a container that asks for CDI devices
(native/hook/runtime/apply.c), from the CDI cache that gpuslice-cdi-cache
makes of the spec dirs (ocihook/cdi_cache.py, cdi/registry.py), and when
that cache is made again. Each test runs the real wrapper, plain and under
ASan/UBSan, over a real bundle, with a stand-in runc that only exits: the
config.json it leaves is what runc would run."""
from __future__ import annotations

import json
import os
import sysconfig
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from fakehost import build_runtime

DEV_NULL = os.stat("/dev/null")
KIND = "gpuslice.io/gpu"


def base_config() -> Dict[str, Any]:
    return {"ociVersion": "1.0.2",
            "process": {"user": {"uid": 0, "gid": 0}, "env": ["PATH=/bin", "A=old"]},
            "root": {"path": "rootfs"},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                       {"destination": "/dev/shm", "type": "tmpfs", "source": "shm"},
                       {"destination": "/etc/hosts", "source": "/h", "options": ["bind"]}],
            "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}}}


def spec(kind: str, devices: Dict[str, Dict[str, Any]], **top: Any) -> Dict[str, Any]:
    doc = {"cdiVersion": "1.1.0", "kind": kind,
           "devices": [{"name": n, "containerEdits": e} for n, e in devices.items()]}
    if top:
        doc["containerEdits"] = top
    return doc


class Rig:
    """A configuration whose spec_dir is specs/, a bundle, and the wrapper."""

    def __init__(self, tmp: Path, asan: bool) -> None:
        self.tmp = tmp
        self.wrapper = build_runtime(asan)
        self.specs = tmp / "specs"
        self.specs.mkdir()
        self.config_file = tmp / "config.yaml"
        self.config_file.write_text(f"spec_dir: {self.specs}\n")
        self.cache = tmp / "cache.json"
        self.bundle = tmp / "bundle"
        self.bundle.mkdir()
        self.runc = tmp / "runc"
        self.runc.write_text(f"#!/bin/sh\ntouch {tmp}/runc-ran\n")
        self.runc.chmod(0o755)
        # The real cache tool, through a stand-in that counts its runs.
        self.tool_log = tmp / "tool-runs"
        real = os.path.join(sysconfig.get_path("scripts"), "gpuslice-cdi-cache")
        self.tool = tmp / "cache-tool"
        self.tool.write_text(f'#!/bin/sh\necho run >> {self.tool_log}\nexec {real} "$@"\n')
        self.tool.chmod(0o755)

    def write_spec(self, name: str, doc: Dict[str, Any], folder: Optional[Path] = None) -> None:
        folder = folder or self.specs
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(doc))

    def tool_runs(self) -> int:
        return len(self.tool_log.read_text().splitlines()) if self.tool_log.exists() else 0

    def run(self, config: Any, env: Optional[Dict[str, str]] = None) -> "Result":
        data = config if isinstance(config, bytes) else json.dumps(config).encode()
        path = self.bundle / "config.json"
        if path.exists() or path.is_symlink():
            path.unlink()
        path.write_bytes(data)
        return self.run_as_is(env)

    def run_as_is(self, env: Optional[Dict[str, str]] = None) -> "Result":
        ran = self.tmp / "runc-ran"
        if ran.exists():
            ran.unlink()
        full = {**os.environ, "GPUSLICE_CONFIG": str(self.config_file),
                "GPUSLICE_CDI_CACHE": str(self.cache), **(env or {})}
        import subprocess

        res = subprocess.run([str(self.wrapper), "--gpuslice-runtime", str(self.runc),
                              "--gpuslice-cache-tool", str(self.tool), "create", "--bundle",
                              str(self.bundle), "c1"], capture_output=True, text=True,
                             env=full, timeout=120)
        return Result(res.returncode, res.stderr, ran.exists(), self.bundle / "config.json")


class Result:
    def __init__(self, code: int, stderr: str, runc_ran: bool, path: Path) -> None:
        self.code, self.stderr, self.runc_ran, self.path = code, stderr, runc_ran, path

    @property
    def config(self) -> Dict[str, Any]:
        return json.loads(self.path.read_text())

    def refused(self, says: str) -> None:
        """One line, status 1, runc not run."""
        assert self.code == 1 and not self.runc_ran, self.stderr
        assert self.stderr.count("\n") == 1 and self.stderr.startswith("gpuslice-runtime: error: ")
        assert says in self.stderr, self.stderr


@pytest.fixture(params=[False, True], ids=["plain", "asan"])
def rig(tmp_path: Path, request: pytest.FixtureRequest) -> Rig:
    return Rig(tmp_path, request.param)


def applied(rig: Rig, edits: Dict[str, Any], config: Optional[Dict[str, Any]] = None
            ) -> Dict[str, Any]:
    """config (base_config()) after the wrapper injected a device with these edits."""
    rig.write_spec("t.json", spec("v.com/t", {"x": edits}))
    config = config or base_config()
    config.setdefault("annotations", {})["cdi.k8s.io/t"] = "v.com/t=x"
    res = rig.run(config)
    assert res.code == 0 and res.runc_ran, res.stderr
    return res.config


def test_env_is_replaced_in_place_or_appended(rig: Rig) -> None:
    c = applied(rig, {"env": ["A=new", "B=1"]})
    assert c["process"]["env"] == ["PATH=/bin", "A=new", "B=1"]
    assert c["annotations"]["gpuslice.io/applied"] == "v.com/t=x"


def test_device_node_from_the_host_and_its_cgroup_rule(rig: Rig) -> None:
    c = applied(rig, {"deviceNodes": [{"path": "/dev/gpu0", "hostPath": "/dev/null"},
                                      {"path": "/dev/ro", "hostPath": "/dev/null",
                                       "permissions": "r"}]})
    major, minor = os.major(DEV_NULL.st_rdev), os.minor(DEV_NULL.st_rdev)
    assert c["linux"]["devices"] == [
        {"path": "/dev/gpu0", "type": "c", "major": major, "minor": minor},
        {"path": "/dev/ro", "type": "c", "major": major, "minor": minor}]
    assert c["linux"]["resources"]["devices"][1:] == [
        {"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"},
        {"allow": True, "type": "c", "major": major, "minor": minor, "access": "r"}]
    # The same path again replaces the node; a non-root user owns it.
    c["process"]["user"] = {"uid": 1000, "gid": 1001}
    del c["annotations"]
    c = applied(rig, {"deviceNodes": [{"path": "/dev/gpu0", "type": "c", "major": 195,
                                       "minor": 3, "fileMode": 0o660}]}, c)
    assert [d["path"] for d in c["linux"]["devices"]] == ["/dev/ro", "/dev/gpu0"]
    assert c["linux"]["devices"][1] == {"path": "/dev/gpu0", "type": "c", "major": 195,
                                        "minor": 3, "fileMode": 0o660, "uid": 1000, "gid": 1001}


def test_a_node_that_cannot_be_read_changes_nothing(rig: Rig) -> None:
    for node, says in (({"path": "/dev/nvidia-gone"},
                        "device node /dev/nvidia-gone: No such file or directory; the CDI spec "
                        "names a node this host does not have (regenerate the spec?)"),
                       ({"path": "/dev/x", "hostPath": "/etc/passwd"},
                        "device node /etc/passwd is not a device (nor a fifo)"),
                       ({"path": "/dev/x", "hostPath": "/dev/null", "type": "b"},
                        "device node /dev/null: the spec says type 'b', the host has 'c'")):
        rig.write_spec("t.json", spec("v.com/t", {"x": {"env": ["X=1"], "deviceNodes": [node]}}))
        config = dict(base_config(), annotations={"cdi.k8s.io/t": "v.com/t=x"})
        res = rig.run(config)
        res.refused(says)
        assert res.config == config


def test_mounts_replace_the_same_destination_then_sort_by_depth_and_path(rig: Rig) -> None:
    c = applied(rig, {"mounts": [{"hostPath": "/lib/a.so", "containerPath": "/usr/lib/x/a.so",
                                  "options": ["ro", "bind"]},
                                 {"hostPath": "/new-hosts", "containerPath": "/etc/hosts"},
                                 {"hostPath": "/run/c", "containerPath": "/run", "type": "bind"},
                                 {"hostPath": "/b", "containerPath": "/usr/./lib//x/../b"}]})
    assert [m["destination"] for m in c["mounts"]] == \
        ["/proc", "/run", "/dev/shm", "/etc/hosts", "/usr/./lib//x/../b", "/usr/lib/x/a.so"]
    assert c["mounts"][3] == {"destination": "/etc/hosts", "source": "/new-hosts"}
    assert c["mounts"][1] == {"destination": "/run", "source": "/run/c", "type": "bind"}
    assert c["mounts"][5]["options"] == ["ro", "bind"]


def test_hooks_gids_rdt_and_net_devices(rig: Rig) -> None:
    config = base_config()
    config["process"]["user"]["additionalGids"] = [45]
    c = applied(rig, {"hooks": [{"hookName": "createContainer", "path": "/bin/h",
                                 "args": ["h", "x"], "env": ["E=1"], "timeout": 5},
                                {"hookName": "poststop", "path": "/bin/p"}],
                      "additionalGids": [44, 45, 44], "intelRdt": {"closID": "g"},
                      "netDevices": [{"hostInterfaceName": "eth9", "name": "net0"}]}, config)
    assert c["hooks"] == {"createContainer": [{"path": "/bin/h", "args": ["h", "x"],
                                               "env": ["E=1"], "timeout": 5}],
                          "poststop": [{"path": "/bin/p"}]}
    assert c["process"]["user"]["additionalGids"] == [45, 44]
    assert c["linux"]["intelRdt"] == {"closID": "g"}
    assert c["linux"]["netDevices"] == {"eth9": {"name": "net0"}}


def test_each_cdi_hook_name_is_its_oci_list(rig: Rig) -> None:
    from cdi.spec import HOOK_NAMES

    c = applied(rig, {"hooks": [{"hookName": n, "path": f"/bin/{n}"} for n in HOOK_NAMES]})
    assert c["hooks"] == {name: [{"path": f"/bin/{name}"}] for name in HOOK_NAMES}


def test_spec_edits_come_once_before_the_devices(rig: Rig) -> None:
    rig.write_spec("v.json", spec("v.com/gpu", {"a": {"env": ["A=1"]}, "b": {"env": ["B=1"]}},
                                  env=["SPEC=1"]))
    res = rig.run({"process": {"env": []},
                   "annotations": {"cdi.k8s.io/x": "v.com/gpu=b,v.com/gpu=a, v.com/gpu=b"}})
    assert res.code == 0, res.stderr
    assert res.config["process"]["env"] == ["SPEC=1", "B=1", "A=1"]


def test_later_dir_wins_same_dir_conflicts_and_what_is_offered(rig: Rig, tmp_path: Path) -> None:
    """The configured spec_dir comes after /etc/cdi and /var/run/cdi; within one
    folder two specs with the same device are a conflict."""
    other = tmp_path / "other"
    rig.config_file.write_text(f"spec_dir: {other}\n")
    rig.write_spec("one.json", spec("v.com/gpu", {"c": {"env": ["C=1"]}}), other)
    rig.write_spec("two.json", spec("v.com/gpu", {"c": {"env": ["C=2"]}, "a": {"env": ["A=1"]}}),
                   other)
    (other / "broken.yaml").write_text("cdiVersion: [\n")
    bad_hook = spec("v.com/gpu", {"h": {"hooks": [{"hookName": "postStop", "path": "/bin/p"}]}})
    rig.write_spec("hook.json", bad_hook, other)
    ask = lambda names: rig.run({"process": {"env": []},  # noqa: E731
                                 "annotations": {"cdi.k8s.io/x": names}})
    ask("v.com/gpu=c").refused("CDI device v.com/gpu=c is defined by more than one spec of the "
                               f"same priority ({other}/one.json, {other}/two.json); remove one")
    res = ask("v.com/gpu=zz")
    res.refused("unknown CDI device v.com/gpu=zz; v.com/gpu offers: a, c; invalid spec files "
                "skipped: ")
    assert "broken.yaml" in res.stderr and "hook.json" in res.stderr  # why one may be missing
    assert "postStop" in res.stderr  # an invalid hook name makes the spec invalid
    ask("other.io/x=1").refused("unknown CDI device other.io/x=1; no spec offers kind other.io/x")
    assert ask("v.com/gpu=a").config["process"]["env"] == ["A=1"]


def test_what_a_config_asks_for(rig: Rig) -> None:
    """env GPUSLICE, then the annotation gpuslice.io/request (our names, plain or
    qualified), then cdi.k8s.io/ annotations by key (qualified only); each once."""
    rig.write_spec("g.json", spec(KIND, {n: {"env": ["G=1"]} for n in ("0-4g", "4g-30", "1")}))
    rig.write_spec("n.json", spec("v.com/nic", {"eth": {"env": ["N=1"]}}))
    res = rig.run({"process": {"env": ["PATH=/bin", "GPUSLICE=0-4g, 4g-30"]},
                   "annotations": {"gpuslice.io/request": "gpuslice.io/gpu=1",
                                   "cdi.k8s.io/z": "gpuslice.io/gpu=0-4g",
                                   "cdi.k8s.io/vendor": "v.com/nic=eth,gpuslice.io/gpu=1",
                                   "other": "x"}})
    assert res.code == 0, res.stderr
    assert res.config["annotations"]["gpuslice.io/applied"] == \
        "gpuslice.io/gpu=0-4g,gpuslice.io/gpu=4g-30,gpuslice.io/gpu=1,v.com/nic=eth"
    for config, says in [
            ({"process": {"env": ["GPUSLICE=  "]}},
             'env GPUSLICE "  " is not a comma-separated list of CDI devices'),
            ({"process": {"env": ["GPUSLICE=0-4g,,1"]}},
             'env GPUSLICE: an empty device name in "0-4g,,1"'),
            ({"annotations": {"cdi.k8s.io/x": "plain"}},
             'annotation cdi.k8s.io/x: device "plain" is not fully qualified '
             "(vendor.com/class=name)"),
            ({"annotations": {"cdi.k8s.io/x": 5}},
             "annotation cdi.k8s.io/x 5 is not a comma-separated list of CDI devices"),
            ({"annotations": {"gpuslice.io/request": ["0"]}},
             'annotation gpuslice.io/request ["0"] is not a comma-separated list'),
            ({"process": {"env": ["GPUSLICE=0/../x"]}},
             "unknown CDI device gpuslice.io/gpu=0/../x; gpuslice.io/gpu offers: 0-4g, 1, 4g-30"),
            ({"process": 5, "annotations": {"gpuslice.io/request": "0-4g"}},
             "config.json process is not an object"),
            ({"process": {"env": ["A", 7]}, "annotations": {"gpuslice.io/request": "0-4g"}},
             "config.json process.env[1] is not a string"),
            ({"mounts": [{"destination": 5}], "annotations": {"gpuslice.io/request": "0-4g"}},
             "config.json mounts[0] is not an object with a string destination")]:
        before = json.dumps(config).encode()
        rig.write_spec("g.json", spec(KIND, {n: {"env": ["X=1"], "mounts": [
            {"hostPath": "/a", "containerPath": "/a"}]} for n in ("0-4g", "4g-30", "1")}))
        res = rig.run(before)
        res.refused(says)
        assert res.path.read_bytes() == before


def test_a_retried_create_changes_nothing(rig: Rig) -> None:
    rig.write_spec("g.json", spec(KIND, {"0": {
        "deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/null"}],
        "hooks": [{"hookName": "poststop", "path": "/bin/true"}]}}))
    config = base_config()
    config["process"]["env"].append("GPUSLICE=0")
    res = rig.run(config)
    assert res.code == 0, res.stderr
    once = res.path.read_bytes()
    again = rig.run_as_is()
    assert again.code == 0 and again.runc_ran and res.path.read_bytes() == once
    assert len(again.config["hooks"]["poststop"]) == 1


def test_the_file_keeps_its_mode_and_no_temporary_is_left(rig: Rig) -> None:
    rig.write_spec("g.json", spec(KIND, {"0": {"env": ["INJECTED=1"]}}))
    conf = base_config()
    conf["process"]["env"].append("GPUSLICE=0")
    (rig.bundle / "config.json").write_text(json.dumps(conf))
    os.chmod(rig.bundle / "config.json", 0o600)
    old = os.umask(0o077)
    try:
        res = rig.run_as_is()
    finally:
        os.umask(old)
    assert res.code == 0, res.stderr
    assert "INJECTED=1" in res.config["process"]["env"]
    assert (rig.bundle / "config.json").stat().st_mode & 0o777 == 0o600
    assert [p.name for p in rig.bundle.iterdir()] == ["config.json"]


def test_hostile_config_json(rig: Rig) -> None:
    """Read once, never through a link, never waited on."""
    asks = json.dumps({"process": {"env": ["GPUSLICE=0"]}})
    (rig.tmp / "target.json").write_text(asks)
    os.symlink(rig.tmp / "target.json", rig.bundle / "config.json")
    res = rig.run_as_is()
    res.refused(f"{rig.bundle}/config.json is a symbolic link, which is not followed here")
    (rig.bundle / "config.json").unlink()
    os.mkfifo(rig.bundle / "config.json")  # no request can be read: runc's to report
    res = rig.run_as_is()
    assert res.code == 0 and res.runc_ran, res.stderr
    (rig.bundle / "config.json").unlink()
    # Valid JSON that the tree reader cannot hold: one line.
    res = rig.run(b'{"process": {"env": ["GPUSLICE=0"]}, "big": 99999999999999999999}')
    res.refused("is not JSON this runtime reads: ")


def test_the_cache_is_made_once_and_again_when_an_input_changes(rig: Rig) -> None:
    rig.write_spec("g.json", spec(KIND, {"0": {"env": ["V=1"]}}))
    ask = {"process": {"env": ["GPUSLICE=0"]}}
    assert rig.run(ask).config["process"]["env"][-1] == "V=1"
    assert rig.tool_runs() == 1
    assert rig.cache.stat().st_mode & 0o777 == 0o644
    # Made within the racy window of its inputs: not trusted, made again.
    assert json.loads(rig.cache.read_text())["trusted"] is False
    time.sleep(2.1)  # past GPUSLICE_CDI_CACHE_RACY_NS: the wrapper's check, no timing asserted
    rig.run(ask)
    assert rig.tool_runs() == 2 and json.loads(rig.cache.read_text())["trusted"] is True
    for _ in range(3):
        assert rig.run(ask).code == 0
    assert rig.tool_runs() == 2  # current: nothing but the wrapper ran
    # The same spec file rewritten in place, same size: its times changed.
    with open(rig.specs / "g.json", "r+") as f:
        text = f.read()
        f.seek(0)
        f.write(text.replace("V=1", "V=2"))
    assert rig.run(ask).config["process"]["env"][-1] == "V=2"
    assert rig.tool_runs() == 3
    rig.write_spec("h.json", spec("v.com/h", {"h": {"env": ["H=1"]}}))  # a new spec: its folder changed
    rig.run(ask)
    assert rig.tool_runs() == 4
    rig.run(ask, env={"GPUSLICE_CONFIG": str(rig.config_file) + "x"})  # another config
    assert rig.tool_runs() == 5


@pytest.mark.parametrize("spoil", ["world-writable", "not-json", "other-version"])
def test_a_cache_not_to_be_trusted_is_made_again(rig: Rig, spoil: str) -> None:
    rig.write_spec("g.json", spec(KIND, {"0": {"env": ["V=1"]}}))
    ask = {"process": {"env": ["GPUSLICE=0"]}}
    assert rig.run(ask).code == 0
    if spoil == "world-writable":
        os.chmod(rig.cache, 0o666)
    elif spoil == "not-json":
        rig.cache.write_text("{")
    else:
        doc = json.loads(rig.cache.read_text())
        doc["version"] = 99
        rig.cache.write_text(json.dumps(doc))
    res = rig.run(ask)
    assert res.code == 0 and res.config["process"]["env"][-1] == "V=1", res.stderr
    assert rig.tool_runs() == 2
    assert rig.cache.stat().st_mode & 0o777 == 0o644
    assert json.loads(rig.cache.read_text())["version"] == 1


def test_a_bad_configuration_is_the_tools_one_line(rig: Rig) -> None:
    rig.config_file.write_text("spec_dir: [\n")
    res = rig.run({"process": {"env": ["GPUSLICE=0"]}})
    assert res.code == 1 and not res.runc_ran
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("gpuslice-cdi-cache: error: ")
    assert str(rig.config_file) in res.stderr
    assert not rig.cache.exists()


def test_cache_tool_usage(tmp_path: Path) -> None:
    import subprocess

    tool = os.path.join(sysconfig.get_path("scripts"), "gpuslice-cdi-cache")
    res = subprocess.run([tool, "--output"], capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr == "gpuslice-cdi-cache: error: usage: gpuslice-cdi-cache [--output FILE]\n"
    out = tmp_path / "c.json"
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"spec_dir: {tmp_path}\n")
    res = subprocess.run([tool], capture_output=True, text=True,
                         env=dict(os.environ, GPUSLICE_CONFIG=str(cfg), GPUSLICE_CDI_CACHE=str(out)))
    assert res.returncode == 0 and res.stderr == "" and json.loads(out.read_text())["kind"] == KIND
    listed: List[str] = [i[0] for i in json.loads(out.read_text())["inputs"]]
    assert listed[:4] == [str(cfg), "/etc/cdi", "/var/run/cdi", str(tmp_path)]


def test_hostile_spec_files_are_skipped_by_name_and_the_rest_serves(rig: Rig) -> None:
    """A spec dir may hold what no spec is: a FIFO (never waited on), a file past
    the size bound, bytes that are not UTF-8, a dangling link. Each is skipped
    with its reason, which a request for a missing device names in one line."""
    rig.write_spec("good.json", spec(KIND, {"0": {"env": ["GOOD=1"]}}))
    os.mkfifo(rig.specs / "fifo.json")
    with open(rig.specs / "huge.json", "wb") as f:
        f.truncate((16 << 20) + 1)
    (rig.specs / "latin1.yaml").write_bytes(b"cdiVersion: \xe9\n")
    os.symlink(rig.specs / "gone", rig.specs / "dangling.json")
    (rig.specs / "newline.json").write_text('{"cdiVersion": "1.1.0", "kind": "a\\nb/c"}')
    assert rig.run({"process": {"env": ["GPUSLICE=0"]}}).config["process"]["env"] == \
        ["GPUSLICE=0", "GOOD=1"]
    res = rig.run({"process": {"env": ["GPUSLICE=1"]}})
    res.refused(f"unknown CDI device {KIND}=1; {KIND} offers: 0; invalid spec files skipped: ")
    for name in ("fifo.json", "huge.json", "latin1.yaml", "dangling.json", "newline.json"):
        assert name in res.stderr, (name, res.stderr)
