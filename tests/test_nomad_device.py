"""gpuslice-nomad-device through HashiCorp's go-plugin client, as a Nomad
client runs it (tests/nomad_client, tests/nomad_harness.py): the handshake,
the health check, the base plugin, then Fingerprint, Reserve and Stats,
each answer checked against the accountant (a real SQLite file) of a node
whose two fake 16 GiB cards the fake driver describes. The container's side
of a reservation is this tree's gpuslice-hook, run as runc runs it.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any, Dict, Iterator, List

import msgpack
import pytest
import yaml

from fakehost import shim_holder
from nomad_harness import REPO, PluginClient, build_client, plugin_command
from test_claim_hook import admit, card_uuid, claim_row, claimed_bundle
from test_hook import Node, err, rows

PROTO = REPO / "ocihook" / "nomad" / "proto"


@pytest.fixture(scope="module")
def nomad_client() -> Path:
    return build_client()


@pytest.fixture
def node(tmp_path: Path, driver_root: Path, fakedriver: Path) -> Node:
    return Node(tmp_path, driver_root, fakedriver)


def start(nomad_client: Path, node: Node, **config: str) -> PluginClient:
    c = PluginClient(nomad_client, plugin_command(node.tmp), node.tmp / "client.log")
    said = c(f'setconfig {{"config": "{node.config}", "fingerprint_period": '
             f'"{config.pop("fingerprint_period", "200ms")}"'
             + "".join(f', "{k}": "{v}"' for k, v in config.items()) + "}")
    assert said == {}, said
    return c


@pytest.fixture
def client(nomad_client: Path, node: Node) -> Iterator[PluginClient]:
    c = start(nomad_client, node)
    yield c
    c.close()


def groups(answer: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    return {g["device_name"]: g for g in answer.get("device_group", [])}


def ids(group: Dict[str, Any], card: int) -> List[str]:
    return [d["ID"] for d in group.get("devices", []) if d["ID"].startswith(f"{card}-")]


def plugin_pid(c: PluginClient) -> int:
    [pid] = re.findall(r"plugin started: path=\S+ pid=(\d+)", c.log_text())
    return int(pid)


def next_fingerprint_where(c: PluginClient, ok: Any) -> Dict[str, Any]:
    """The Fingerprint stream's answers until one satisfies ok (the stream sends
    only changes; each wait is the client's, 30 s)."""
    for _ in range(20):
        fp = c("fingerprint")
        assert "error" not in fp, fp
        if ok(groups(fp)):
            return fp
    raise AssertionError("the offers never changed as expected")


def test_go_plugin_handshake_health_and_base_plugin(nomad_client: Path, node: Node) -> None:
    c = PluginClient(nomad_client, plugin_command(node.tmp), node.tmp / "client.log")
    assert c.started == {"started": True, "protocol": "grpc", "version": 2}
    assert c("ping") == {"serving": True}
    info = c("info")
    assert info["type"] == "DEVICE" and info["name"] == "gpuslice"
    assert info["plugin_api_versions"] == ["v0.1.0"]
    attrs = c("schema")["spec"]["object"]["attributes"]
    assert {k: v["default"]["default"]["literal"]["value"] for k, v in attrs.items()} == \
        {"config": '""', "fingerprint_period": '"5s"', "claim_timeout": '"5m"'}
    assert {v["default"]["primary"]["Attr"]["type"] for v in attrs.values()} == {"string"}
    assert c.close() == {"exited": True}
    log = c.log_text()
    assert "[ERROR]" not in log and "[WARN]" not in log, log


def test_fingerprint_offers_the_slices_that_fit(client: PluginClient, node: Node) -> None:
    fp = groups(client("fingerprint"))
    # The configuration's profiles, each a group; 32g is larger than the cards.
    assert sorted(fp) == ["32g", "4g", "4g-30", "6g"]
    assert all(g["vendor"] == "gpuslice" and g["device_type"] == "gpu" for g in fp.values())
    assert "devices" not in fp["32g"]
    counts = {name: (len(ids(g, 0)), len(ids(g, 1))) for name, g in fp.items()}
    # 16384 MiB a card: 4 of 4 GiB, 2 of 6 GiB; 4g-30 also by compute (3 x 30%).
    assert counts == {"4g": (4, 4), "4g-30": (3, 3), "6g": (2, 2), "32g": (0, 0)}
    a = fp["4g-30"]["attributes"]
    assert a["memory"] == {"int_val": "4096", "unit": "MiB"}
    assert a["cores"] == {"int_val": "30", "unit": "%"}
    assert a["card_model"] == {"string_val": "NVIDIA H200"}
    assert a["driver_version"] == {"string_val": "580.95.05"}
    assert all(d.get("healthy", False) for g in fp.values() for d in g.get("devices", []))
    # A container started by hand takes 6 GiB of card 0: the offers follow.
    assert admit(node, "by-hand", "0-6g", card_uuid(node, 0), 6144).returncode == 0
    now = groups(next_fingerprint_where(
        client, lambda g: len(ids(g["4g"], 0)) == 2))
    assert (len(ids(now["4g-30"], 0)), len(ids(now["6g"], 0))) == (2, 1)
    assert ids(now["4g"], 0) == ids(fp["4g"], 0)[:2]  # the free ones keep their IDs
    assert ids(now["4g"], 1) == ids(fp["4g"], 1)


def test_reserve_is_taken_over_by_the_container(client: PluginClient, node: Node) -> None:
    fp = groups(client("fingerprint"))
    iid = ids(fp["4g-30"], 0)[0]
    res = client(f"reserve {iid}")["container_res"]
    token = res["envs"]["GPUSLICE_CLAIM"]
    assert re.fullmatch(r"[0-9a-f]{32}", token)
    assert res["envs"] == {"GPUSLICE": "0-4g-30", "GPUSLICE_CLAIM": token,
                           "GPUSLICE_MEMORY_LIMIT": "4096MiB", "GPUSLICE_CORE_LIMIT": "30",
                           "GPUSLICE_PRIORITY": "normal"}
    devices = {d["task_path"]: d for d in res["devices"]}
    assert devices["/dev/nvidia0"]["host_path"] == str(node.host.dev_root / "dev" / "nvidia0")
    assert "/dev/nvidiactl" in devices and "/dev/nvidia1" not in devices
    mounts = {m["task_path"]: m for m in res["mounts"]}
    assert mounts["/usr/lib/gpuslice/libgpuslice.so"] == {
        "task_path": "/usr/lib/gpuslice/libgpuslice.so", "host_path": str(node.host.shim),
        "read_only": True}
    # The accountant holds it for the plugin's process, under the claim.
    uuid0 = card_uuid(node, 0)
    assert rows(node.db, "SELECT container_id, device, card_uuid, memory_mib, cores, pid "
                "FROM reservations") == \
        [(claim_row(token), "0-4g-30", uuid0, 4096, 30, plugin_pid(client))]
    # Never offered again; one slice fewer on card 0 for every profile.
    now = groups(next_fingerprint_where(client, lambda g: iid not in ids(g["4g-30"], 0)))
    assert (len(ids(now["4g-30"], 0)), len(ids(now["4g"], 0))) == (2, 3)
    again = client(f"reserve {iid}")
    assert again["code"] == "NotFound" and iid in again["error"]
    stats = client("stats")["groups"]
    [g] = stats
    assert (g["vendor"], g["type"], g["name"]) == ("gpuslice", "gpu", "4g-30")
    s = g["instance_stats"][iid]["stats"]["attributes"]
    assert s["memory_limit"]["int_numerator_val"] == "4096"
    assert s["container"].get("string_val", "") == ""
    # The task's container starts (the hook as runc runs it): it takes the
    # claim over, and Stats follow it there.
    proc = subprocess.Popen(["sleep", "600"])
    cid = "c" * 64
    try:
        made = node.create(cid, "0-4g-30", claimed_bundle(node, "task", token), pid=proc.pid)
        assert made.returncode == 0, made.stderr
        assert rows(node.db, "SELECT container_id, memory_mib, pid FROM reservations") == \
            [(cid, 4096, proc.pid)]
        used = used_stats(client, iid, cid, node)
        assert used["memory_used"]["int_numerator_val"] == "1536"
        assert used["memory_limit"]["int_numerator_val"] == "4096"
    finally:
        proc.kill()
        proc.wait()
    # The container stops: the slice is free again, and offered under a new ID.
    assert node.release(cid).returncode == 0
    back = groups(next_fingerprint_where(client, lambda g: len(ids(g["4g-30"], 0)) == 3))
    assert iid not in ids(back["4g-30"], 0)
    for _ in range(50):
        if iid not in {i for g in client("stats").get("groups", [])
                       for i in g["instance_stats"]}:
            break
    else:
        raise AssertionError("Stats still report the stopped container's instance")


def test_reserve_gives_the_task_the_profiles_priority(nomad_client: Path, node: Node) -> None:
    """A task reserved with a `priority: high` profile is told so, as a
    container given the same slice by the spec is: one environment for both."""
    with node.config.open("a") as f:
        f.write("  - {name: 2g-hi, memory: 2GiB, cores: 20, priority: high}\n")
    node.generate()
    c = start(nomad_client, node)
    try:
        iid = ids(groups(c("fingerprint"))["2g-hi"], 1)[0]
        envs = c(f"reserve {iid}")["container_res"]["envs"]
    finally:
        c.close()
    assert envs["GPUSLICE_PRIORITY"] == "high"
    assert rows(node.db, "SELECT device, priority FROM reservations") == [("1-2g-hi", "high")]
    # The spec's device of that name says the same: its env is the task's,
    # less the device's name and the token.
    [path] = [p for p in node.host.spec_dir.glob("gpuslice.*") if p.suffix in (".json", ".yaml")]
    [dev] = [d for d in yaml.safe_load(path.read_text())["devices"] if d["name"] == "1-2g-hi"]
    given = dict(e.split("=", 1) for e in dev["containerEdits"]["env"])
    del given["LD_PRELOAD"]
    assert given == {k: v for k, v in envs.items() if k not in ("GPUSLICE", "GPUSLICE_CLAIM")}


def test_reserve_on_an_mps_card_gives_the_specs_mps_client_env_and_folders(
        nomad_client: Path, node: Node) -> None:
    """A slice of a card in MPS mode, reserved through Nomad, is an MPS client as the
    spec's device of that name is: MPS's env in place of the compute cap, the card's
    pipe and shm folders mounted, and admitted as an MPS slice (--mps)."""
    with node.config.open("a") as f:
        f.write("  - {name: 2g-50, memory: 2GiB, cores: 50}\ncard_modes: {1: mps}\n")
    node.generate()
    pipe = node.state_dir / "mps" / card_uuid(node, 1) / "pipe"
    pipe.mkdir(parents=True, exist_ok=True)  # cdi generate made the MPS card's folders
    os.mkfifo(pipe / "control")  # the daemon's control pipe, as the hook looks for it
    c = start(nomad_client, node)
    try:
        iid = ids(groups(c("fingerprint"))["2g-50"], 1)[0]
        res = c(f"reserve {iid}")["container_res"]
    finally:
        c.close()
    envs = res["envs"]
    assert envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert "GPUSLICE_CORE_LIMIT" not in envs
    [path] = [p for p in node.host.spec_dir.glob("gpuslice.*") if p.suffix in (".json", ".yaml")]
    [dev] = [d for d in yaml.safe_load(path.read_text())["devices"] if d["name"] == "1-2g-50"]
    given = dict(e.split("=", 1) for e in dev["containerEdits"]["env"])
    del given["LD_PRELOAD"]
    assert given == {k: v for k, v in envs.items() if k not in ("GPUSLICE", "GPUSLICE_CLAIM")}
    mounted = {m["task_path"]: m["host_path"] for m in res.get("mounts", [])}
    for m in dev["containerEdits"]["mounts"]:
        assert mounted.get(m["containerPath"]) == m["hostPath"]
    assert mounted["/run/nvidia-mps"] == str(pipe)
    # Admitted: the hook refuses a slice not asked for as MPS (--mps) on an MPS card.
    assert rows(node.db, "SELECT device FROM reservations") == [("1-2g-50",)]


def used_stats(client: PluginClient, iid: str, cid: str, node: Node) -> Dict[str, Any]:
    """Stats of iid while a process of container cid holds 1536 MiB through the
    shim (the region that Stats read)."""
    with shim_holder(node.host.gpus_json, node.fakedriver, node.state_dir / "containers" / cid,
                     "4GiB", "1536M"):
        for _ in range(100):
            [g] = client("stats")["groups"]
            attrs = g["instance_stats"][iid]["stats"]["attributes"]
            if attrs["container"].get("string_val") == cid and "memory_used" in attrs and \
                    attrs["memory_used"].get("int_numerator_val") == "1536":
                return attrs
        raise AssertionError(f"Stats never showed the container's use: {attrs}")


def test_a_claim_no_container_took_is_given_back(nomad_client: Path, node: Node) -> None:
    c = start(nomad_client, node, claim_timeout="1s")
    try:
        fp = groups(c("fingerprint"))
        iid = ids(fp["6g"], 1)[0]
        token = c(f"reserve {iid}")["container_res"]["envs"]["GPUSLICE_CLAIM"]
        assert rows(node.db, "SELECT container_id FROM reservations") == [(claim_row(token),)]
        next_fingerprint_where(c, lambda g: len(ids(g["6g"], 1)) == 1)
        next_fingerprint_where(c, lambda g: len(ids(g["6g"], 1)) == 2)
        assert rows(node.db, "SELECT count(*) FROM reservations") == [(0,)]
        assert rows(node.db, "SELECT kind FROM events WHERE container_id=? ORDER BY id",
                    claim_row(token)) == [("admit",), ("operator-release",)]
        assert f"gave back {claim_row(token)[:12]}" in c.log_text()
    finally:
        c.close()


# What a claim shows and who may take or give it back (issue 27): the row's
# id is shown (the exporter's labels, `gpuslice status`, events, the plugin's
# log), so it is the token's hash and nothing shown holds the token; the
# plugin gives back only claims it made and still holds.

def exposition(node: Node) -> str:
    """What `gpuslice exporter` serves, made by its own collector and registry."""
    from prometheus_client import generate_latest

    from ocihook import exporter

    collector = exporter.NodeCollector(str(node.state_dir), str(node.db), None)
    return generate_latest(exporter.registry(collector)).decode()


def everything_shown(node: Node, client: PluginClient) -> str:
    out = [exposition(node), client.log_text()]
    for args in (("status",), ("status", "--json"), ("top", "--once")):
        res = node.host.run(*args)
        assert res.returncode == 0, res.stderr
        out += [res.stdout, res.stderr]
    out += [" ".join(map(str, r)) for r in rows(node.db, "SELECT * FROM events")]
    out += [" ".join(map(str, r)) for r in rows(node.db, "SELECT * FROM reservations")]
    return "\n".join(out)


def test_nothing_shown_holds_the_token_nor_takes_the_row(client: PluginClient,
                                                         node: Node) -> None:
    iid = ids(groups(client("fingerprint"))["6g"], 0)[0]
    token = client(f"reserve {iid}")["container_res"]["envs"]["GPUSLICE_CLAIM"]
    # The other slice of card 0 is a container's: the card is full.
    assert admit(node, "neighbour", "0-6g", card_uuid(node, 0), 6144).returncode == 0
    shown = everything_shown(node, client)
    assert token not in shown
    assert claim_row(token) in shown  # the row is listed, under its hash
    # Every run of 32 hex digits a reader can see, tried as a claim: none
    # takes the row (each is admitted as any container, and the card is full).
    tried = sorted({m for run in re.findall(r"[0-9a-f]{32,}", shown)
                    for m in (run[:32], run[-32:])})
    assert tried
    for i, guess in enumerate(tried):
        res = node.create(f"thief{i}", "0-6g", claimed_bundle(node, f"thief{i}", guess),
                          pid=os.getpid())
        assert res.returncode == 1, res.stderr
        assert "6144 MiB asked" in err(res)
    assert rows(node.db, "SELECT container_id FROM reservations ORDER BY 1") == \
        sorted([(claim_row(token),), ("neighbour",)])
    # The task's own container, with the token, still takes it.
    res = node.create("task", "0-6g", claimed_bundle(node, "task", token), pid=os.getpid())
    assert res.returncode == 0, res.stderr
    assert rows(node.db, "SELECT container_id FROM reservations ORDER BY 1") == \
        [("neighbour",), ("task",)]
    assert token not in everything_shown(node, client)


def test_the_plugin_gives_back_only_its_own_claims(nomad_client: Path, node: Node) -> None:
    """A row named like a claim but not the plugin's (here admitted by hand for a
    live process, as a container an older hook let in would be) outlives the
    claim timeout; the plugin's own untaken claim is given back."""
    proc = subprocess.Popen(["sleep", "600"])
    c = start(nomad_client, node, claim_timeout="1s")
    try:
        uuid1 = card_uuid(node, 1)
        res = subprocess.run([str(node.hook_path), "admit", "--id", "claim-mine", "--device",
                              "1-6g", "--card", uuid1, "--memory-mib", "6144", "--pid",
                              str(proc.pid), "--database", str(node.db), "--state-dir",
                              str(node.state_dir)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        iid = ids(groups(c("fingerprint"))["6g"], 1)[0]
        token = c(f"reserve {iid}")["container_res"]["envs"]["GPUSLICE_CLAIM"]
        next_fingerprint_where(c, lambda g: len(ids(g["6g"], 1)) == 0)
        # Its own claim is given back after the timeout; the other row stays.
        next_fingerprint_where(c, lambda g: len(ids(g["6g"], 1)) == 1)
        assert rows(node.db, "SELECT container_id, pid FROM reservations") == \
            [("claim-mine", proc.pid)]
        assert f"gave back {claim_row(token)[:12]}" in c.log_text()
        assert "gave back claim-mine" not in c.log_text()
    finally:
        c.close()
        proc.kill()
        proc.wait()


def test_reserve_is_refused_where_a_container_took_the_room(nomad_client: Path,
                                                           node: Node) -> None:
    # Offers that do not change until Reserve: the room goes in between.
    c = start(nomad_client, node, fingerprint_period="1h")
    try:
        fp = groups(c("fingerprint"))
        iid = ids(fp["6g"], 0)[0]
        for cid in ("a", "b"):
            assert admit(node, cid, "0-6g", card_uuid(node, 0), 6144).returncode == 0
        said = c(f"reserve {iid}")
        assert said["code"] == "ResourceExhausted"
        assert "\n" not in said["error"]
        assert "0-6g: card 0 (" in said["error"]
        assert "has 4096 MiB free of 16384 MiB, 6144 MiB asked" in said["error"]
        assert rows(node.db, "SELECT container_id FROM reservations ORDER BY 1") == \
            [("a",), ("b",)]
        # The refusal made the plugin look again at once.
        now = groups(next_fingerprint_where(c, lambda g: not ids(g["6g"], 0)))
        assert len(ids(now["4g"], 0)) == 1
    finally:
        c.close()


def test_a_card_out_of_service_offers_unhealthy_instances(client: PluginClient,
                                                          node: Node) -> None:
    client("fingerprint")
    off = node.host.run("card", "disable", "0", "--reason", "XID 79 seen")
    assert off.returncode == 0, off.stderr
    fp = groups(next_fingerprint_where(
        client, lambda g: not all(d.get("healthy", False) for d in g["4g"]["devices"])))
    for d in fp["4g"]["devices"]:
        if d["ID"].startswith("0-"):
            assert not d.get("healthy", False)
            assert d["health_description"].startswith("card 0 is out of service: XID 79 seen")
        else:
            assert d.get("healthy", False)
    said = client(f"reserve {ids(fp['4g'], 0)[0]}")
    assert said["code"] == "FailedPrecondition"
    assert "card 0 is out of service (XID 79 seen" in said["error"]
    assert rows(node.db, "SELECT count(*) FROM reservations") == [(0,)]


def one_line(said: Dict[str, Any], code: str, *parts: str) -> None:
    assert said.get("code") == code, said
    line = said["error"]
    assert "\n" not in line and line.startswith("gpuslice-nomad-device: error: "), line
    for p in parts:
        assert p in line, (p, line)


def test_bad_input_is_one_line(client: PluginClient, node: Node) -> None:
    cases = [
        ("setconfig-raw c1", "is not MessagePack"),
        ("setconfig-raw " + msgpack.packb([1, 2]).hex(), "plugin config is a list"),
        ("setconfig-raw " + msgpack.packb({"fingerprint_period": 5}).hex(),
         "fingerprint_period 5 is not a duration"),
        ('setconfig {"colour": "blue"}', "'colour', which gpuslice-nomad-device does not know"),
        ('setconfig {"fingerprint_period": "0s"}', "fingerprint_period '0s' is not a duration "
         "from 0.1s to 3600s"),
        ('setconfig {"fingerprint_period": "5 s"}', "'5 s' is not a duration"),
        ('setconfig {"claim_timeout": "forever"}', "claim_timeout 'forever' is not a duration"),
        (f'setconfig {{"config": "{node.tmp}/nothing.yaml"}}', "nothing.yaml"),
    ]
    for command, part in cases:
        one_line(client(command), "InvalidArgument", part)
    fp = groups(client("fingerprint"))  # the good configuration stays in force
    assert len(ids(fp["4g"], 0)) == 4
    one_line(client("reserve no-such-id"), "NotFound", "device id 'no-such-id' is not")
    two = f"{ids(fp['4g'], 0)[0]} {ids(fp['4g'], 1)[0]}"
    one_line(client(f"reserve {two}"), "InvalidArgument", "Reserve of 2 instances",
             "count = 1")
    one_line(client("reserve"), "InvalidArgument", "Reserve of 0 instances")
    assert rows(node.db, "SELECT count(*) FROM reservations") == [(0,)]


def test_a_huge_value_gets_a_bounded_error(client: PluginClient, node: Node) -> None:
    """gRPC carries the error line in a header with a 16 KiB limit, and replaces
    a longer status with RESOURCE_EXHAUSTED "Stream removed": the line quoting a
    1 MB setting or a 100 KB device id is cut, keeping its rule and fix. (A
    million digits as a duration is refused at once, not after minutes of the
    duration pattern's backtracking.)"""
    bound = 16 * 1024 // 12  # characters that fit the header however they are encoded
    said = client('setconfig {"fingerprint_period": "' + "9" * 1_000_000 + '"}')
    one_line(said, "InvalidArgument", "fingerprint_period '999", "characters left out",
             "is not a duration from 0.1s to 3600s")
    assert len(said["error"]) <= bound
    said = client('setconfig {"config": "/' + "c" * 1_000_000 + '.yaml"}')
    one_line(said, "InvalidArgument", "/ccc", "characters left out", ".yaml")
    assert len(said["error"]) <= bound
    said = client("reserve " + "y" * 100_000)
    one_line(said, "NotFound", "device id 'yyy", "characters left out",
             "Nomad places the task again by the next fingerprint")
    assert len(said["error"]) <= bound
    assert len(groups(client("fingerprint"))) > 0  # still serving


@pytest.mark.parametrize("env, part", [
    ({}, "NOMAD_PLUGIN_MAGIC_COOKIE is not set"),
    ({"NOMAD_PLUGIN_MAGIC_COOKIE": "x"}, "is not Nomad's plugin cookie"),
    ({"PLUGIN_PROTOCOL_VERSIONS": "1"}, "PLUGIN_PROTOCOL_VERSIONS '1' does not offer protocol 2"),
    ({"PLUGIN_CLIENT_CERT": "pem"}, "AutoMTLS"),
], ids=["no-cookie", "wrong-cookie", "protocol", "mtls"])
def test_started_other_than_by_go_plugin_is_one_line(tmp_path: Path, env: Dict[str, str],
                                                     part: str) -> None:
    from ocihook.nomad.goplugin import MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE

    full = {k: v for k, v in os.environ.items() if k != MAGIC_COOKIE_KEY}
    if env:
        full[MAGIC_COOKIE_KEY] = MAGIC_COOKIE_VALUE
    full.update(env)
    res = subprocess.run([str(plugin_command(tmp_path))], env=full, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuslice: error: ") and part in lines[0], \
        res.stderr


def test_the_generated_code_is_what_protoc_makes_of_the_protos(tmp_path: Path) -> None:
    """ocihook/nomad/proto/*_pb2.py are `make protos`' output, kept in the tree."""
    protos = sorted(PROTO.glob("*.proto"))
    assert len(protos) == 7
    subprocess.run(["protoc", "-I", str(REPO), f"--python_out={tmp_path}",
                    *[str(p.relative_to(REPO)) for p in protos]], check=True, cwd=REPO)
    made = tmp_path / "ocihook" / "nomad" / "proto"
    assert sorted(p.name for p in made.glob("*_pb2.py")) == \
        sorted(p.name for p in PROTO.glob("*_pb2.py"))
    for p in made.glob("*_pb2.py"):
        assert p.read_bytes() == (PROTO / p.name).read_bytes(), \
            f"{p.name} differs from protoc's: run `make protos`"


def test_before_setconfig_a_broken_default_is_said_not_crashed(nomad_client: Path,
                                                              node: Node) -> None:
    """Nomad calls SetConfig first; a plugin asked before it uses the defaults,
    and a default configuration it cannot read leaves it offering nothing,
    with the reason in the client's log."""
    missing = node.tmp / "no-such-config.yaml"
    c = PluginClient(nomad_client, plugin_command(node.tmp), node.tmp / "client.log",
                     env=dict(os.environ, GPUSLICE_CONFIG=str(missing)))
    try:
        assert c("fingerprint") == {}
        said = c("reserve 0-4g-00000000")
        assert said["code"] == "FailedPrecondition" and str(missing) in said["error"]
        assert str(missing) in c.log_text()
        assert c("ping") == {"serving": True}
    finally:
        c.close()
