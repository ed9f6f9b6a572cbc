"""The CDI edits applier (cdi/apply.py), device resolution across spec dirs
(cdi/registry.py) and what a config.json asks for (ocihook/runtime_apply.py)."""
from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any, Dict

import pytest

from cdi.apply import ApplyError, apply, joined_edits
from cdi.registry import Registry, ResolveError
from cdi.spec import ContainerEdits, Spec
from ocihook.runtime_apply import RequestError, inject, requested_devices

DEV_NULL = os.stat("/dev/null")


def base_config() -> Dict[str, Any]:
    return {"ociVersion": "1.0.2",
            "process": {"user": {"uid": 0, "gid": 0}, "env": ["PATH=/bin", "A=old"]},
            "root": {"path": "rootfs"},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                       {"destination": "/dev/shm", "type": "tmpfs", "source": "shm"},
                       {"destination": "/etc/hosts", "source": "/h", "options": ["bind"]}],
            "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}}}


def edits(**d: Any) -> ContainerEdits:
    return ContainerEdits.from_dict(d)


def test_env_is_replaced_in_place_or_appended() -> None:
    c = base_config()
    apply(c, edits(env=["A=new", "B=1"]))
    assert c["process"]["env"] == ["PATH=/bin", "A=new", "B=1"]


def test_device_node_from_the_host_and_its_cgroup_rule() -> None:
    c = base_config()
    apply(c, edits(deviceNodes=[{"path": "/dev/gpu0", "hostPath": "/dev/null"},
                                {"path": "/dev/ro", "hostPath": "/dev/null",
                                 "permissions": "r"}]))
    major, minor = os.major(DEV_NULL.st_rdev), os.minor(DEV_NULL.st_rdev)
    assert c["linux"]["devices"] == [
        {"path": "/dev/gpu0", "type": "c", "major": major, "minor": minor},
        {"path": "/dev/ro", "type": "c", "major": major, "minor": minor}]
    assert c["linux"]["resources"]["devices"][1:] == [
        {"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"},
        {"allow": True, "type": "c", "major": major, "minor": minor, "access": "r"}]
    # The same path again replaces the node; a non-root user owns it.
    c["process"]["user"] = {"uid": 1000, "gid": 1001}
    apply(c, edits(deviceNodes=[{"path": "/dev/gpu0", "type": "c", "major": 195, "minor": 3}]))
    assert [d["path"] for d in c["linux"]["devices"]] == ["/dev/ro", "/dev/gpu0"]
    assert c["linux"]["devices"][1] == {"path": "/dev/gpu0", "type": "c", "major": 195,
                                        "minor": 3, "uid": 1000, "gid": 1001}


def test_a_missing_node_changes_nothing() -> None:
    c = base_config()
    before = copy.deepcopy(c)
    with pytest.raises(ApplyError, match="/dev/nvidia-gone: No such file"):
        apply(c, edits(env=["X=1"], deviceNodes=[{"path": "/dev/nvidia-gone"}]))
    assert c == before
    with pytest.raises(ApplyError, match="is not a device"):
        apply(c, edits(deviceNodes=[{"path": "/dev/x", "hostPath": "/etc/passwd"}]))


def test_mounts_replace_the_same_destination_then_sort_by_depth_and_path() -> None:
    c = base_config()
    apply(c, edits(mounts=[{"hostPath": "/lib/a.so", "containerPath": "/usr/lib/x/a.so",
                            "options": ["ro", "bind"]},
                           {"hostPath": "/new-hosts", "containerPath": "/etc/hosts"},
                           {"hostPath": "/run/c", "containerPath": "/run", "type": "bind"}]))
    assert [m["destination"] for m in c["mounts"]] == \
        ["/proc", "/run", "/dev/shm", "/etc/hosts", "/usr/lib/x/a.so"]  # depth, then path
    assert c["mounts"][3] == {"destination": "/etc/hosts", "source": "/new-hosts"}
    assert c["mounts"][4]["options"] == ["ro", "bind"]


def test_hooks_gids_rdt_and_net_devices() -> None:
    c = base_config()
    apply(c, edits(hooks=[{"hookName": "createContainer", "path": "/bin/h", "args": ["h", "x"],
                           "env": ["E=1"], "timeout": 5},
                          {"hookName": "poststop", "path": "/bin/p"}],
                   additionalGids=[44, 0, 44, 45], intelRdt={"closID": "g"},
                   netDevices=[{"hostInterfaceName": "eth9", "name": "net0"}]))
    assert c["hooks"] == {"createContainer": [{"path": "/bin/h", "args": ["h", "x"],
                                               "env": ["E=1"], "timeout": 5}],
                          "poststop": [{"path": "/bin/p"}]}
    assert c["process"]["user"]["additionalGids"] == [44, 45]
    assert c["linux"]["intelRdt"] == {"closID": "g"}
    assert c["linux"]["netDevices"] == {"eth9": {"name": "net0"}}


def test_each_cdi_hook_name_is_its_oci_list_and_no_other_is_applied() -> None:
    from cdi.spec import HOOK_NAMES

    c = base_config()
    apply(c, edits(hooks=[{"hookName": name, "path": f"/bin/{name}"} for name in HOOK_NAMES]))
    assert c["hooks"] == {name: [{"path": f"/bin/{name}"}] for name in HOOK_NAMES}
    before = copy.deepcopy(c)
    with pytest.raises(ApplyError, match="hook name 'postStop' is not one of prestart, "):
        apply(c, edits(env=["X=1"], hooks=[{"hookName": "postStop", "path": "/bin/p"}]))
    assert c == before


def spec(kind: str, devices: Dict[str, Dict[str, Any]], **top: Any) -> Dict[str, Any]:
    doc = {"cdiVersion": "0.5.0", "kind": kind,
           "devices": [{"name": n, "containerEdits": e} for n, e in devices.items()]}
    if top:
        doc["containerEdits"] = top
    return doc


def write(folder: Path, name: str, doc: Dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(doc))


def test_spec_edits_come_once_before_the_devices(tmp_path: Path) -> None:
    write(tmp_path / "etc", "v.json", spec("v.com/gpu", {"a": {"env": ["A=1"]},
                                                         "b": {"env": ["B=1"]}},
                                           env=["SPEC=1"]))
    reg = Registry.load([str(tmp_path / "etc")])
    joined = joined_edits(reg.resolve(["v.com/gpu=b", "v.com/gpu=a", "v.com/gpu=b"]))
    assert joined.env == ["SPEC=1", "B=1", "A=1"]


def test_later_dir_wins_same_dir_conflicts(tmp_path: Path) -> None:
    etc, run = tmp_path / "etc", tmp_path / "run"
    write(etc, "one.json", spec("v.com/gpu", {"a": {"env": ["FROM=etc"]},
                                             "c": {"env": ["C=1"]}}))
    write(etc, "two.json", spec("v.com/gpu", {"c": {"env": ["C=2"]}}))
    write(run, "one.json", spec("v.com/gpu", {"a": {"env": ["FROM=run"]}}))
    (etc / "broken.yaml").write_text("cdiVersion: [\n")
    reg = Registry.load([str(etc), str(run)])
    assert joined_edits(reg.resolve(["v.com/gpu=a"])).env == ["FROM=run"]
    with pytest.raises(ResolveError, match="v.com/gpu=c is defined by more than one spec"):
        reg.resolve(["v.com/gpu=c"])
    with pytest.raises(ResolveError) as e:
        reg.resolve(["v.com/gpu=zz"])
    assert "unknown CDI device v.com/gpu=zz; v.com/gpu offers: a, c" in str(e.value)
    assert "broken.yaml" in str(e.value)  # why a device might be missing
    with pytest.raises(ResolveError, match="no spec offers kind other.io/x"):
        reg.resolve(["other.io/x=1"])


def test_what_a_config_asks_for() -> None:
    kind = "gpuslice.io/gpu"
    c = {"process": {"env": ["PATH=/bin", "GPUSLICE=0-4g, 4g-30"]},
         "annotations": {"gpuslice.io/request": "gpuslice.io/gpu=1",
                         "cdi.k8s.io/vendor": "v.com/nic=eth,gpuslice.io/gpu=0-4g",
                         "other": "x"}}
    assert requested_devices(c, kind) == ["gpuslice.io/gpu=0-4g", "gpuslice.io/gpu=4g-30",
                                          "gpuslice.io/gpu=1", "v.com/nic=eth"]
    assert requested_devices({"process": {"env": ["GPUSLICEX=1"]}}, kind) == []
    bad = [({"process": {"env": ["GPUSLICE="]}}, "env GPUSLICE '' is not a comma-separated"),
           ({"process": {"env": ["GPUSLICE=0/../x"]}}, "env GPUSLICE"),
           ({"annotations": {"cdi.k8s.io/x": "plain"}}, "'plain' is not fully qualified"),
           ({"annotations": {"cdi.k8s.io/x": 5}}, "annotation cdi.k8s.io/x 5"),
           ({"annotations": []}, "annotations is not an object")]
    for config, message in bad:
        with pytest.raises(RequestError) as e:
            requested_devices(config, kind)
        assert message in str(e.value), (config, str(e.value))


def test_inject_once(tmp_path: Path) -> None:
    write(tmp_path, "g.json", spec("gpuslice.io/gpu", {"0": {
        "deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/null"}],
        "hooks": [{"hookName": "poststop", "path": "/bin/true"}]}}))
    c = base_config()
    c["process"]["env"].append("GPUSLICE=0")
    assert inject(c, "gpuslice.io/gpu", [str(tmp_path)]) == ["gpuslice.io/gpu=0"]
    once = copy.deepcopy(c)
    assert inject(c, "gpuslice.io/gpu", [str(tmp_path)]) is None  # a retried create
    assert c == once and len(c["hooks"]["poststop"]) == 1
    assert inject(base_config(), "gpuslice.io/gpu", [str(tmp_path)]) is None  # no request


def test_applier_command(tmp_path: Path) -> None:
    """gpuslice-runtime-apply as gpuslice-runtime runs it: the config rewritten in place,
    its mode kept; a bad request a one-line error and the file as it was."""
    specs = tmp_path / "cdi"
    write(specs, "g.json", spec("gpuslice.io/gpu", {"0": {"env": ["INJECTED=1"]}}))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"spec_dir: {specs}\n")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    conf = base_config()
    conf["process"]["env"].append("GPUSLICE=0")
    (bundle / "config.json").write_text(json.dumps(conf))
    os.chmod(bundle / "config.json", 0o600)
    env = dict(os.environ, GPUSLICE_CONFIG=str(cfg))
    res = subprocess.run(["gpuslice-runtime-apply", "--bundle", str(bundle)], env=env,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    got = json.loads((bundle / "config.json").read_text())
    assert "INJECTED=1" in got["process"]["env"]
    assert (bundle / "config.json").stat().st_mode & 0o777 == 0o600
    assert [p.name for p in bundle.iterdir()] == ["config.json"]  # no temporary left
    conf["process"]["env"][-1] = "GPUSLICE=0-99g"
    (bundle / "config.json").write_text(json.dumps(conf))
    before = (bundle / "config.json").read_bytes()
    res = subprocess.run(["gpuslice-runtime-apply", "--bundle", str(bundle)], env=env,
                         capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr == ("gpuslice-runtime: error: unknown CDI device gpuslice.io/gpu=0-99g; "
                          "gpuslice.io/gpu offers: 0\n")
    assert (bundle / "config.json").read_bytes() == before


@pytest.mark.parametrize("make, says", [
    (lambda p: os.mkfifo(p), "is a FIFO, not a regular file"),
    (lambda p: os.symlink("/dev/zero", p), "is a symbolic link, which is not followed here"),
    (lambda p: p.write_text("[" * 100000 + "]" * 100000), "is not JSON this runtime reads: "
                                                          "nested too deep"),
    (lambda p: p.write_text('["x", {"process": 1}, 3]'), "is not a JSON object"),
])
def test_applier_on_a_hostile_config_json_says_one_line(tmp_path: Path, make, says) -> None:
    """The applier runs as root on the container author's config.json: a FIFO is
    not waited on, a link not followed, a deep nesting no traceback."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    make(bundle / "config.json")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"spec_dir: {tmp_path / 'cdi'}\n")
    res = subprocess.run(["gpuslice-runtime-apply", "--bundle", str(bundle)],
                         env=dict(os.environ, GPUSLICE_CONFIG=str(cfg)), capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("gpuslice-runtime: error: ")
    assert str(bundle / "config.json") in res.stderr and says in res.stderr, res.stderr
