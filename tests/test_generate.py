"""`gpuslice cdi generate` against the fake NVML and a fake host on disk."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest
import yaml

from fakehost import DRIVER_VERSION, LIBDIR, Host, devices, fake_gpu, official_validator

@pytest.fixture
def host_factory(tmp_path: Path, driver_root: Path, fakedriver: Path):
    def make(gpus: List[Dict], extra_config: str = "") -> Host:
        return Host(tmp_path, driver_root, gpus, extra_config)
    return make


@pytest.mark.parametrize("count", [1, 2, 8])
def test_devices_for_n_cards(host_factory, count):
    gpus = [fake_gpu(i, memory_mib=16384) for i in range(count)]
    host = host_factory(gpus)
    spec = host.spec()
    official_validator().validate(spec)
    assert spec["cdiVersion"] == "0.5.0" and spec["kind"] == "gpuslice.io/gpu"
    names = [d["name"] for d in spec["devices"]]
    expected = []
    for g in gpus:
        expected += [str(g["minor"]), g["uuid"]]
    expected.append("all")
    for i in range(count):
        expected += [f"{i}-4g", f"{i}-4g-30"]  # 32g exceeds a 16 GiB card
    expected += ["4g", "4g-30"]
    # Gangs: from 2 up to every card that fits, per profile (none on one card).
    expected += [f"{n}x{p}" for p in ("4g", "4g-30") for n in range(2, count + 1)]
    assert names == expected
    devs = devices(spec)
    for i, g in enumerate(gpus):
        node = {"path": f"/dev/nvidia{i}", "hostPath": f"{host.dev_root}/dev/nvidia{i}"}
        assert devs[str(i)]["deviceNodes"] == [node]
        assert devs[g["uuid"]]["deviceNodes"] == [node]
        assert devs[f"{i}-4g"]["deviceNodes"] == [node]
    assert len(devs["all"]["deviceNodes"]) == count
    assert len(devs["4g"]["deviceNodes"]) == count


def test_spec_wide_edits_name_the_driver(host_factory):
    host = host_factory([fake_gpu(0)])
    edits = host.spec()["containerEdits"]
    assert edits["env"] == [f"GPUSLICE_DRIVER_VERSION={DRIVER_VERSION}"]
    assert [n["path"] for n in edits["deviceNodes"]] == [
        "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    mounts = {m["containerPath"]: m for m in edits["mounts"]}
    for soname in ("libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1",
                   "libnvidia-nvvm.so.4", "libcudadebugger.so.1"):
        m = mounts[f"{LIBDIR}/{soname}"]
        # The soname link, not the versioned file: the spec survives an upgrade.
        assert m["hostPath"] == f"{host.driver_root}{LIBDIR}/{soname}"
        assert m["options"] == ["ro", "nosuid", "nodev", "bind"]
    assert not any("libunrelated" in p for p in mounts)
    assert f"{LIBDIR}/libnvidia-cfg.so" not in mounts  # unversioned: the linker's, not ours
    assert mounts["/usr/bin/nvidia-smi"]["hostPath"] == f"{host.driver_root}/usr/bin/nvidia-smi"
    assert f"/lib/firmware/nvidia/{DRIVER_VERSION}" in mounts
    assert len(mounts) == 7


def test_slice_edits(host_factory):
    host = host_factory([fake_gpu(0)])
    devs = devices(host.spec())
    capped, plain = devs["0-4g-30"], devs["0-4g"]
    assert capped["env"] == ["GPUSLICE_MEMORY_LIMIT=4096MiB", "GPUSLICE_CORE_LIMIT=30",
                             "GPUSLICE_PRIORITY=normal",
                             "LD_PRELOAD=/usr/lib/gpuslice/libgpuslice.so"]
    assert plain["env"] == ["GPUSLICE_MEMORY_LIMIT=4096MiB", "GPUSLICE_PRIORITY=normal",
                            "LD_PRELOAD=/usr/lib/gpuslice/libgpuslice.so"]
    assert capped["mounts"] == [{"hostPath": str(host.shim),
                                 "containerPath": "/usr/lib/gpuslice/libgpuslice.so",
                                 "options": ["ro", "nosuid", "nodev", "bind"]},
                                {"hostPath": str(host.tmp / "state" / "cards"),
                                 "containerPath": "/run/gpuslice/cards",
                                 "options": ["rw", "nosuid", "nodev", "noexec", "bind"]}]
    # Generating made the card folder: any tenant's user writes there.
    assert (host.tmp / "state" / "cards").stat().st_mode & 0o7777 == 0o1777
    create, release = capped["hooks"]
    assert create["hookName"] == "createContainer" and create["path"] == str(host.hook)
    # The hook reads no configuration: the spec tells it the request and where
    # the books are; the admission policy is the books', not the device's.
    books = ["--database", str(host.tmp / "state.db"), "--state-dir", str(host.tmp / "state")]
    assert create["args"] == ["gpuslice-hook", "create", "--device", "0-4g-30",
                              "--card", fake_gpu(0)["uuid"], "--memory-mib", "4096",
                              "--cores", "30", "--priority", "normal", *books,
                              "--preload", "env"]
    assert release["hookName"] == "poststop"
    assert release["args"] == ["gpuslice-hook", "release", *books]
    assert all(e.startswith("PATH=") for e in create["env"])
    # Whole cards carry the hooks (the accountant must see them) but no limits.
    assert "env" not in devs["0"] and "mounts" not in devs["0"]
    assert devs["0"]["hooks"][0]["args"][2:6] == ["--device", "0", "--card", fake_gpu(0)["uuid"]]


def test_priority_is_in_the_env_and_the_hook_args_of_slices_only(host_factory):
    host = host_factory([fake_gpu(0)], extra_config=(
        "  - {name: 2g-50-hi, memory: 2GiB, cores: 50, priority: high}\n"
        "  - {name: 2g-lo, memory: 2GiB, priority: low}\n"
        "  - {name: 2g, memory: 2GiB, priority: normal}\n"))
    devs = devices(host.spec())
    for name, priority in [("0-2g-50-hi", "high"), ("2g-50-hi", "high"), ("0-2g-lo", "low"),
                           ("2g-lo", "low"), ("0-2g", "normal"), ("2g", "normal"),
                           ("0-4g", "normal")]:
        env = devs[name]["env"]
        # After the limits, before LD_PRELOAD; always, normal too, so that the
        # spec's value replaces one the container set itself.
        assert [e for e in env if e.startswith("GPUSLICE_PRIORITY=")] == \
            [f"GPUSLICE_PRIORITY={priority}"], name
        assert env.index(f"GPUSLICE_PRIORITY={priority}") == len(env) - 2, name
        args = devs[name]["hooks"][0]["args"]
        at = args.index("--priority")
        assert args[at - 2:at + 2] == ["--cores", args[at - 1], "--priority", priority], name
    assert devs["0-2g-50-hi"]["env"][:2] == ["GPUSLICE_MEMORY_LIMIT=2048MiB",
                                             "GPUSLICE_CORE_LIMIT=50"]
    # A whole card is shared with no one: no priority in its env or its request.
    for name in ("0", fake_gpu(0)["uuid"], "all"):
        assert "env" not in devs[name]
        assert "--priority" not in devs[name]["hooks"][0]["args"], name


def test_mig_card_is_offered_whole_only(host_factory):
    host = host_factory([fake_gpu(0, memory_mib=16384), fake_gpu(1, memory_mib=16384, mig=True)])
    res, spec = host.generated()
    assert "GPU 1" in res.stderr and "MIG mode" in res.stderr
    devs = devices(spec)
    assert "1" in devs and fake_gpu(1)["uuid"] in devs
    assert not any(n.startswith("1-") for n in devs)
    assert [n["path"] for n in devs["4g"]["deviceNodes"]] == ["/dev/nvidia0"]
    assert len(devs["all"]["deviceNodes"]) == 2


def test_profile_larger_than_every_card_is_not_offered(host_factory):
    host = host_factory([fake_gpu(0, memory_mib=16384), fake_gpu(1, memory_mib=81920)])
    res, spec = host.generated()
    devs = devices(spec)
    assert "1-32g" in devs and "0-32g" not in devs
    assert [n["path"] for n in devs["32g"]["deviceNodes"]] == ["/dev/nvidia1"]
    host.set_gpus([fake_gpu(0, memory_mib=16384)])
    res, spec = host.generated()
    assert "profile '32g' fits no sliceable card" in res.stderr
    assert "32g" not in devices(spec)


def test_lost_card_is_left_out_with_a_warning(host_factory):
    host = host_factory([fake_gpu(0), fake_gpu(1, health="lost")])
    res, spec = host.generated()
    assert "GPU 1 does not answer NVML" in res.stderr
    devs = devices(spec)
    assert "0" in devs and "1" not in devs


def test_nonstandard_minor_numbers(host_factory):
    host = host_factory([fake_gpu(0, minor=3), fake_gpu(1, minor=0)])
    devs = devices(host.spec())
    assert devs["0"]["deviceNodes"][0]["path"] == "/dev/nvidia3"
    assert devs["1"]["deviceNodes"][0]["path"] == "/dev/nvidia0"


def test_missing_optional_nodes_are_left_out(host_factory):
    host = host_factory([fake_gpu(0)])
    for name in ("nvidia-uvm", "nvidia-uvm-tools"):
        (host.dev_root / "dev" / name).unlink()
    edits = host.spec()["containerEdits"]
    assert [n["path"] for n in edits["deviceNodes"]] == ["/dev/nvidiactl"]


@pytest.mark.parametrize("remove, message", [
    ("nvidiactl", "nvidiactl is missing"),
    ("nvidia0", "has no device node"),
])
def test_missing_required_nodes_are_errors(host_factory, remove, message):
    host = host_factory([fake_gpu(0)])
    (host.dev_root / "dev" / remove).unlink()
    res = host.run("cdi", "generate")
    assert res.returncode == 2
    assert message in res.stderr and str(host.dev_root) in res.stderr
    assert not host.spec_dir.exists()


def test_writes_atomically_into_spec_dir(host_factory):
    host = host_factory([fake_gpu(0)])
    res = host.run("cdi", "generate")
    assert res.returncode == 0, res.stderr
    path = host.spec_dir / "gpuslice.yaml"
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert sorted(os.listdir(host.spec_dir)) == ["gpuslice.yaml"]  # no temporary left
    doc = yaml.safe_load(path.read_text())
    official_validator().validate(doc)
    assert f"wrote {path}" in res.stdout
    # Switching format replaces our spec: one spec of ours, never two.
    assert host.run("cdi", "generate", "--format", "json").returncode == 0
    assert sorted(os.listdir(host.spec_dir)) == ["gpuslice.json"]
    assert json.loads((host.spec_dir / "gpuslice.json").read_text()) == doc


def test_dry_run_writes_nothing(host_factory):
    host = host_factory([fake_gpu(0)])
    res = host.run("cdi", "generate", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert "would write" in res.stdout
    assert not host.spec_dir.exists()


def test_check_up_to_date_then_stale_after_driver_upgrade(host_factory):
    host = host_factory([fake_gpu(0)])
    assert host.run("cdi", "generate").returncode == 0
    res = host.run("cdi", "generate", "--check")
    assert res.returncode == 0, res.stderr
    assert "up to date" in res.stdout
    host.set_gpus([fake_gpu(0)], driver_version="590.10.01")
    res = host.run("cdi", "generate", "--check")
    assert res.returncode == 1
    assert "made for driver 580.95.05, host has 590.10.01" in res.stderr
    assert "refresh it with: gpuslice cdi generate" in res.stderr


def test_check_reports_vanished_host_paths(host_factory, tmp_path, driver_root):
    import shutil

    copy = tmp_path / "driver-copy"
    shutil.copytree(driver_root, copy, symlinks=True)
    host = host_factory([fake_gpu(0)], extra_config="")
    host.config.write_text(host.config.read_text().replace(str(driver_root), str(copy)))
    assert host.run("cdi", "generate").returncode == 0
    (copy / "usr" / "bin" / "nvidia-smi").unlink()
    res = host.run("cdi", "generate", "--check")
    assert res.returncode == 1
    assert f"host path {copy}/usr/bin/nvidia-smi does not exist" in res.stderr


def test_check_sees_a_new_card_and_a_missing_spec(host_factory):
    host = host_factory([fake_gpu(0), fake_gpu(1)])
    res = host.run("cdi", "generate", "--check")
    assert res.returncode == 1 and "cannot read" in res.stderr
    host.set_gpus([fake_gpu(0)])
    assert host.run("cdi", "generate").returncode == 0
    host.set_gpus([fake_gpu(0), fake_gpu(1)])
    res = host.run("cdi", "generate", "--check")
    assert res.returncode == 1 and "device 1 is missing from the spec" in res.stderr


BAD_CONFIGS = [
    ("profiles: [{name: a, memory: 1g\n", ", column 1: did not find expected ',' or '}'"),
    ("colour: blue\n", "unknown key 'colour'"),
    ("profiles: [{name: small, memory: 100MiB}]\n", "'100MiB' is under the minimum of 128 MiB"),
    ("profiles: [{name: odd, memory: 300MiB}]\n", "'300MiB' is not a multiple of 128 MiB"),
    ("profiles: [{name: hot, memory: 1g, cores: 101}]\n", "cores 101 is out of range"),
    ("profiles: [{name: a, memory: 1g}, {name: b, memory: 1g, priority: urgent}]\n",
     "profiles[1]: priority 'urgent' is not high, normal or low; use one of those, or leave "
     "priority out for normal"),
    ("profiles: [{name: a, memory: 1g, priority: 3}]\n",
     "profiles[0]: priority 3 is not high, normal or low; use one of those"),
    ("profiles: [{name: a, memory: 1g, priority: HIGH}]\n", "priority 'HIGH' is not high"),
    ("profiles: [{name: a, memory: 1g, priority: }]\n", "priority None is not high"),
    ("profiles: [{name: a, memory: 1g}, {name: a, memory: 2g}]\n",
     "profile name 'a' is already used by profiles[0]"),
    ("profiles: [{name: 2x8g, memory: 8g}]\n",
     "profile name '2x8g' starts with a number and 'x', the form of a gang's device (2x4g: "
     "two slices of 4g); name it otherwise, e.g. 4g"),
]


@pytest.mark.parametrize("text, message", BAD_CONFIGS)
def test_bad_config_is_one_line_exit_2_nothing_written(host_factory, tmp_path, text, message):
    host = host_factory([fake_gpu(0)])
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"spec_dir: {host.spec_dir}\n" + text)
    for args in (("cdi", "generate"), ("config", "check", str(bad))):
        res = host.run(*args, config=bad)
        assert res.returncode == 2, res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0] and str(bad) in lines[0], res.stderr
        assert not host.spec_dir.exists()


def test_driver_root_without_driver(host_factory, tmp_path):
    host = host_factory([fake_gpu(0)])
    empty = tmp_path / "empty-root"
    (empty / "etc").mkdir(parents=True)
    res = host.run("cdi", "generate", "--driver-root", str(empty))
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0
    assert f"driver root {empty} has no ld cache" in res.stderr
    (empty / "etc" / "ld.so.conf").write_text("/usr/lib\n")
    subprocess.run(["ldconfig", "-r", str(empty)], check=True)
    res = host.run("cdi", "generate", "--driver-root", str(empty))
    assert res.returncode == 2
    assert f"driver root {empty} holds no NVIDIA driver" in res.stderr
    assert "libcuda.so.* and libnvidia-ml.so.*" in res.stderr
    assert not host.spec_dir.exists()


def test_nvml_that_cannot_start_is_a_clear_error(host_factory):
    host = host_factory([fake_gpu(0)])
    host.gpus_json.write_text("{not json")
    res = host.run("cdi", "generate")
    assert res.returncode == 2
    assert "NVML" in res.stderr and "did not start" in res.stderr
    assert not host.spec_dir.exists()


def test_list_prints_what_a_runtime_accepts(host_factory):
    host = host_factory([fake_gpu(0)])
    assert host.run("cdi", "generate").returncode == 0
    (host.spec_dir / "broken.yaml").write_text("cdiVersion: 0.5.0\nkind: x\n")
    res = host.run("cdi", "list")
    assert res.returncode == 0
    assert res.stdout.split() == [f"gpuslice.io/gpu={n}" for n in
                                  ["0", fake_gpu(0)["uuid"], "all", "0-4g", "0-4g-30", "0-32g",
                                   "4g", "4g-30", "32g"]]
    assert "broken.yaml" in res.stderr


def test_validate(host_factory, tmp_path):
    host = host_factory([fake_gpu(0)])
    assert host.run("cdi", "generate").returncode == 0
    ours = host.spec_dir / "gpuslice.yaml"
    foreign = tmp_path / "nvidia.yaml"
    foreign.write_text("cdiVersion: 0.6.0\nkind: nvidia.com/gpu\nannotations: {a: b}\n"
                       "devices:\n- name: gpu0\n  containerEdits:\n"
                       "    deviceNodes: [{path: /dev/nvidia0}]\n")
    res = host.run("cdi", "validate", str(ours), str(foreign))
    assert res.returncode == 0, res.stderr
    assert "cdiVersion 0.5.0" in res.stdout and "nvidia.com/gpu" in res.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: gpu0\n"
                   "  containerEdits: {env: [NOVALUE]}\n")
    res = host.run("cdi", "validate", str(bad))
    assert res.returncode == 1
    assert str(bad) in res.stderr and "NOVALUE" in res.stderr


def test_config_show_is_the_effective_configuration(host_factory):
    host = host_factory([fake_gpu(0)])
    res = host.run("config", "show", "--format", "json")
    assert res.returncode == 0, res.stderr
    shown = json.loads(res.stdout)
    assert shown["spec_dir"] == str(host.spec_dir)
    assert shown["placement"] == "binpack" and shown["memory_overcommit"] == 1.0
    assert shown["cores_limit"] == 100
    assert shown["profiles"][1] == {"name": "4g-30", "memory": "4GiB", "cores": 30,
                                    "priority": "normal"}
    res = host.run("config", "check", str(host.config))
    assert res.returncode == 0 and "valid" in res.stdout


def test_priority_parsed_and_shown():
    from cdi.profiles import Profile
    from ocihook import config

    cfg = config.parse_text("profiles:\n  - {name: a, memory: 1g}\n"
                            "  - {name: b, memory: 1g, cores: 50, priority: high}\n"
                            "  - {name: c, memory: 1g, priority: low}\n"
                            "  - {name: d, memory: 1g, priority: normal}\n", "c.yaml")
    assert cfg.profiles == [Profile("a", 1024), Profile("b", 1024, 50, "high"),
                            Profile("c", 1024, 0, "low"), Profile("d", 1024, 0, "normal")]
    assert cfg.profiles[0].priority == "normal"  # absent: normal
    assert [p["priority"] for p in cfg.to_dict()["profiles"]] == ["normal", "high", "low",
                                                                  "normal"]
    # What `config show` prints reads back as the same configuration.
    assert config.from_document(cfg.to_dict(), "shown").profiles == cfg.profiles
    # The defaults stay normal.
    assert {p.priority for p in config.Config().profiles} == {"normal"}


def test_whole_cards_carry_hooks_only_once_the_hook_is_installed(host_factory):
    host = host_factory([fake_gpu(0)])
    host.hook.unlink()
    res, spec = host.generated()
    assert f"{host.hook} is not installed: whole cards are offered without" in res.stderr
    devs = devices(spec)
    assert "hooks" not in devs["0"] and "hooks" not in devs["all"]
    # A slice never runs unaccounted: it keeps its hooks and fails to start instead.
    assert [h["hookName"] for h in devs["0-4g"]["hooks"]] == ["createContainer", "poststop"]
    assert host.run("cdi", "generate").returncode == 0
    host.hook.write_text("#!/bin/sh\nexit 0\n")
    host.hook.chmod(0o755)
    res = host.run("cdi", "generate", "--check")
    assert res.returncode == 1
    assert "edits differ" in res.stderr


def test_dri_nodes_come_from_sysfs(tmp_path):
    """A card's /dev/dri nodes are those its PCI device's drm folder lists."""
    from cdi.devnodes import card_nodes
    from cdi.nvml import Gpu
    from fakehost import mknod_char

    gpu = Gpu(index=0, uuid="GPU-x", name="n", minor=2, memory_mib=1024,
              pci_bus_id="00000000:3B:00.0", mig=False)
    sysfs = tmp_path / "sys"
    drm = sysfs / "bus" / "pci" / "devices" / "0000:3b:00.0" / "drm"
    for entry in ("card1", "renderD129", "controlD65"):
        (drm / entry).mkdir(parents=True)
    dev = tmp_path / "dev"
    mknod_char(dev / "dev" / "nvidia2", 195, 2)
    mknod_char(dev / "dev" / "dri" / "card1", 226, 1)
    mknod_char(dev / "dev" / "dri" / "renderD129", 226, 129)
    nodes = card_nodes(gpu, str(dev), str(sysfs))
    assert [(n.path, n.host_path) for n in nodes] == [
        ("/dev/nvidia2", f"{dev}/dev/nvidia2"),
        ("/dev/dri/card1", f"{dev}/dev/dri/card1"),
        ("/dev/dri/renderD129", f"{dev}/dev/dri/renderD129"),
    ]
    # A node sysfs names but /dev lacks is left out; no drm folder, no DRI nodes.
    (dev / "dev" / "dri" / "card1").unlink()
    assert [n.path for n in card_nodes(gpu, str(dev), str(sysfs))] == [
        "/dev/nvidia2", "/dev/dri/renderD129"]
    assert [n.path for n in card_nodes(gpu, str(dev), str(tmp_path / "nosys"))] == [
        "/dev/nvidia2"]


def test_build_spec_returns_its_warnings_and_only_reads_its_options(tmp_path, driver_root):
    """Warnings are what build_spec found, returned; the options it was given
    are the same after as before, so two builds from them say the same."""
    import dataclasses

    from cdi.generate import GenerateOptions, build_spec
    from cdi.nvml import Gpu, Inventory
    from cdi.profiles import Profile
    from fakehost import make_dev_root

    gpus = [Gpu(index=i, uuid=f"GPU-{i}", name="n", minor=i, memory_mib=16384,
                pci_bus_id=f"00000000:1{i}:00.0", mig=i == 1) for i in range(2)]
    inv = Inventory(DRIVER_VERSION, "13.0", gpus, ["GPU 2"])
    opts = GenerateOptions(kind="gpuslice.io/gpu", profiles=[Profile("4g", 4096),
                                                             Profile("64g", 65536)],
                           card_dir=str(tmp_path / "cards"), card_dir_mount="/run/gpuslice/cards",
                           driver_root=str(driver_root),
                           dev_root=str(make_dev_root(tmp_path / "dev", [0, 1])),
                           sys_root=str(tmp_path / "nosys"),
                           hook_path=str(tmp_path / "no-hook"), hook_installed=False)
    before = dataclasses.asdict(opts)
    first = build_spec(inv, opts)
    second = build_spec(inv, opts)
    assert dataclasses.asdict(opts) == before
    assert first[1] == second[1] == [
        f"{tmp_path / 'no-hook'} is not installed: whole cards are offered without the "
        "accountant's hooks; run this again once it is",
        "GPU 2 does not answer NVML (GPU is lost): not offered",
        "GPU 1 (GPU-1) is in MIG mode: offered whole only",
        "profile '64g' fits no sliceable card: not offered"]
    assert first[0].to_dict() == second[0].to_dict()
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.hook_installed = True  # type: ignore[misc]


@pytest.mark.parametrize("command", ["status", "release", "gc", "config check", "cdi generate",
                                     "setup docker"])
def test_the_cli_module_runs_every_command(command):
    """`python3 -m ocihook.cli` is the whole command line, as `gpuslice` is:
    its __main__ guard comes after the last command."""
    import sys

    from ocihook import cli

    res = subprocess.run([sys.executable, "-m", "ocihook.cli", *command.split(), "--help"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"Usage: gpuslice {command} [OPTIONS]")
    # And every command the group has is among those reached so.
    listed = subprocess.run([sys.executable, "-m", "ocihook.cli", "--help"],
                            capture_output=True, text=True, timeout=60).stdout
    assert all(f"  {name} " in listed for name in cli.cli.commands)
