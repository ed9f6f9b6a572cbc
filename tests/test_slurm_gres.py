"""The Slurm side without Slurm: the shard rule (ocihook/slurm/shards.py),
the gres.conf lines `gpuslice slurm gres` writes and checks from the CDI spec
of a fake host, and `gpuslice slurm admit` when gres.conf and gpuslice
disagree (more shards than gpuslice cuts a card in)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from fakehost import Host, fake_gpu
from ocihook.slurm.shards import ShardError, slice_of


def test_k_of_n_shards_is_k_over_n_of_the_card_on_the_grain() -> None:
    assert slice_of(4, 8, 16384, False).memory_mib == 8192
    # 3/8 of 16000 MiB is 6000 MiB: rounded down to the 128 MiB grain.
    assert slice_of(3, 8, 16000, False).memory_mib == 5888
    assert slice_of(4, 8, 16384, False).cores == 0
    assert slice_of(3, 8, 16384, True).cores == 37
    assert slice_of(8, 8, 16384, True).cores == 100


def test_more_shards_than_a_card_has_or_a_slice_under_the_grain_is_refused() -> None:
    with pytest.raises(ShardError, match=r"9 shards .* in 8 .*slurm_shards.*gres --check"):
        slice_of(9, 8, 16384, False)
    with pytest.raises(ShardError, match=r"under 128 MiB"):
        slice_of(1, 256, 16384, False)


@pytest.fixture
def host(tmp_path: Path, driver_root: Path) -> Host:
    h = Host(tmp_path, driver_root, [fake_gpu(0, memory_mib=16384), fake_gpu(1, memory_mib=16384)],
             extra_config="slurm_shards: 8\n")
    assert h.run("cdi", "generate").returncode == 0
    return h


def test_gres_lines_name_each_cards_node_in_index_order(host: Host) -> None:
    res = host.run("slurm", "gres", "--node", "n1")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    dev = host.dev_root / "dev"
    assert lines[1:-1] == [f"NodeName=n1 Name=gpu File={dev}/nvidia0",
                           f"NodeName=n1 Name=shard Count=8 File={dev}/nvidia0",
                           f"NodeName=n1 Name=gpu File={dev}/nvidia1",
                           f"NodeName=n1 Name=shard Count=8 File={dev}/nvidia1"]
    assert lines[0].startswith("# BEGIN gpuslice") and lines[-1] == "# END gpuslice"


def test_write_keeps_other_lines_and_check_finds_a_disagreement(host: Host, tmp_path: Path) -> None:
    conf = tmp_path / "gres.conf"
    conf.write_text("AutoDetect=off\n")
    wrote = host.run("slurm", "gres", "--write", str(conf))
    assert wrote.returncode == 0, wrote.stderr
    assert "Gres=gpu:2,shard:16" in wrote.stdout
    assert conf.read_text().startswith("AutoDetect=off\n# BEGIN gpuslice")
    again = host.run("slurm", "gres", "--write", str(conf))
    assert again.returncode == 0 and conf.read_text().count("# BEGIN gpuslice") == 1
    ok = host.run("slurm", "gres", "--check", str(conf))
    assert ok.returncode == 0, ok.stderr
    host.config.write_text(host.config.read_text().replace("slurm_shards: 8", "slurm_shards: 4"))
    bad = host.run("slurm", "gres", "--check", str(conf))
    assert bad.returncode == 1
    [line] = bad.stderr.splitlines()
    assert "Count=8" in line and "Count=4" in line and "gres --write" in line, line
    both = host.run("slurm", "gres", "--write", str(conf), "--check", str(conf))
    assert both.returncode == 2 and len(both.stderr.splitlines()) == 1, both.stderr


def test_admit_refuses_more_shards_than_gpuslice_cuts_a_card_in(host: Host) -> None:
    host.use_real_hook()
    res = host.run("slurm", "admit", "--job", "7", "--step", "batch", "--uid", "0", "--gid", "0",
                   "--pid", str(os.getpid()), "--cards", "0", "--shards", "12")
    assert res.returncode == 1, res.stderr
    [line] = res.stderr.splitlines()
    assert line.startswith("gpuslice: job 7: the job has 12 shards") and "slurm_shards" in line
    several = host.run("slurm", "admit", "--job", "8", "--step", "0", "--uid", "0", "--gid", "0",
                       "--pid", str(os.getpid()), "--cards", "0,1", "--shards", "8")
    assert several.returncode == 1 and "one card per job" in several.stderr, several.stderr


def test_a_jobs_name_fits_the_hooks_rule_whatever_the_user_name() -> None:
    from ocihook.slurm.job import Step, holder_name

    assert holder_name(Step(12, "batch", 1000, 1000, 42, "0", 4, "alice")) == "12.batch alice"
    long = holder_name(Step(12, "0", 1000, 1000, 42, "0", 4, "\u00e9" * 300))
    assert len(long.encode()) <= 256 and long.startswith("12.0 \u00e9")


def test_admit_prints_the_steps_env_and_makes_the_jobs_folder(host: Host) -> None:
    host.use_real_hook()
    host.config.write_text(host.config.read_text() + "slurm_cores: true\n")
    args = ["slurm", "admit", "--job", "9", "--step", "0", "--uid", "4321", "--gid", "8765",
            "--pid", str(os.getpid()), "--cards", "1", "--shards", "4", "--user", "bob"]
    res = host.run(*args)
    assert res.returncode == 0, res.stderr
    env = dict(line.split("=", 1) for line in res.stdout.splitlines())
    folder = host.tmp / "state" / "containers" / "slurm-9"
    assert env == {"LD_PRELOAD": str(host.shim), "GPUSLICE_MEMORY_LIMIT": "8192MiB",
                   "GPUSLICE_CORE_LIMIT": "50", "GPUSLICE_STATE_DIR": str(folder),
                   "GPUSLICE_CARD_DIR": str(host.tmp / "state" / "cards")}
    st = folder.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (4321, 8765, 0o700)
    # The folder is the user's: a link they put at the env file's name is
    # replaced, never written through, when a second step of the job starts.
    target = host.tmp / "roots-file"
    target.write_text("root's\n")
    (folder / "slurm.env").unlink()
    (folder / "slurm.env").symlink_to(target)
    # A second step of the job shares the row: admitted again, booked once.
    assert host.run(*args[:5], "batch", *args[6:]).returncode == 0
    assert target.read_text() == "root's\n"
    assert not (folder / "slurm.env").is_symlink()
    assert "GPUSLICE_MEMORY_LIMIT=8192MiB" in (folder / "slurm.env").read_text()
    status = host.run("status")
    assert status.stdout.count("slurm-9") == 1 and "slurm-9 (9.0 bob)" in status.stdout, \
        status.stdout
    # Released only by the slurmstepd that holds it, then for good.
    other = host.run("slurm", "release", "--job", "9", "--pid", str(os.getpid() + 100000))
    assert other.returncode == 0 and other.stdout == ""
    mine = host.run("slurm", "release", "--job", "9", "--pid", str(os.getpid()))
    assert mine.stdout.strip() == "released slurm-9" and not folder.exists()


def test_no_container_may_take_a_slurm_jobs_id(tmp_path: Path, driver_root: Path,
                                              fakedriver: Path) -> None:
    """A container named slurm-<id> would pass for the job: share its slice,
    and be released by its epilog. The hook refuses the id, in one line."""
    from test_hook import Node, err

    node = Node(tmp_path, driver_root, fakedriver)
    res = node.create("slurm-12", "0-4g")
    assert res.returncode == 2
    assert "starts with \"slurm-\", which gpuslice keeps for Slurm jobs' slices" in err(res)
    assert not any(node.held().values())


def test_bind_takes_gpuslices_paths_and_env_only_for_the_jobs_own_folder(host: Host) -> None:
    """`gpuslice slurm bind` (oci.conf's RunTimeRun): the job's folder must be
    the container user's; of its env file only LD_PRELOAD and GPUSLICE_*; the
    binds are the configuration's paths, whatever an env says."""
    from ocihook import config as config_mod
    from ocihook.slurm import container

    cfg = config_mod.load(str(host.config))
    doc = {"process": {"user": {"uid": 4321}, "env": ["LD_PRELOAD=/mine.so", "A=1"]}}
    assert not container.edit(cfg, doc, 9)  # no folder: a step without shards
    folder = host.tmp / "state" / "containers" / "slurm-9"
    folder.mkdir(parents=True)
    (folder / "slurm.env").write_text(f"LD_PRELOAD={host.shim}\nGPUSLICE_MEMORY_LIMIT=4096MiB\n"
                                      "PATH=/evil\n")
    with pytest.raises(container.BindError, match=r"belongs to uid 0, the container runs as "
                                                 r"uid 4321"):
        container.edit(cfg, doc, 9)
    os.chown(folder, 4321, 4321)
    assert container.edit(cfg, doc, 9)
    env = doc["process"]["env"]
    assert f"LD_PRELOAD={host.shim} /mine.so" in env and "GPUSLICE_MEMORY_LIMIT=4096MiB" in env
    assert "A=1" in env and not any(e.startswith("PATH=") for e in env)
    assert [m["source"] for m in doc["mounts"]] == [str(host.shim), cfg.card_dir(), str(folder)]
    assert [m["options"][1] for m in doc["mounts"]] == ["ro", "ro", "rw"]
