"""Gangs: several slices of one device, each on its own card, admitted all or
none in one transaction of gpuslice-hook, placed by the cards' topology.

The topology is the fake NVML's (its JSON: pairs with a PCIe level and
NVLinks, NVSwitches, NUMA nodes), recorded by a real `gpuslice cdi generate`
into a real SQLite file; the real hook admits. The placement tables below
are the examples of docs/architecture.md (Gangs).
"""
from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest

from fakehost import Host, fake_gpu, fake_gpus_doc
from ocihook import accountant as acct, cheader
from test_hook import make_bundle

REPO = Path(__file__).resolve().parent.parent
GIB_MIB = 1024
PROFILES = ("  - {name: 8g, memory: 8GiB}\n  - {name: 24g, memory: 24GiB}\n"
            "  - {name: 8g-30, memory: 8GiB, cores: 30}\n")

Pair = Tuple[int, int, str, int]  # card, card, PCIe level, NVLinks


def topology(count: int, numa: Sequence[int], pairs: Sequence[Pair] = (),
             nvswitch: int = 0, memory_mib: int = 32 * GIB_MIB) -> Dict[str, Any]:
    """A fake host's GPUs JSON: `count` cards, card i on NUMA node numa[i]; pairs
    not named are across the system, with no NVLink; nvswitch: links from every
    card to NVSwitches."""
    doc = fake_gpus_doc(0, [fake_gpu(i, memory_mib=memory_mib, numa_node=numa[i])
                            for i in range(count)])
    doc["topology"] = [{"gpus": [a, b], "level": level, **({"nvlinks": n} if n else {})}
                       for a, b, level, n in pairs]
    if nvswitch:
        doc["nvswitch"] = {"gpus": list(range(count)), "links": nvswitch}
    return doc


def within(groups: Sequence[Sequence[int]], level: str, nvlinks: int = 0) -> List[Pair]:
    """Every pair inside each group, at `level`."""
    return [(a, b, level, nvlinks) for g in groups for i, a in enumerate(g) for b in g[i + 1:]]


def minus(pairs: List[Pair], others: List[Pair]) -> List[Pair]:
    taken = {(a, b) for a, b, _, _ in others}
    return [p for p in pairs if (p[0], p[1]) not in taken] + others


TOPOLOGIES: Dict[str, Dict[str, Any]] = {
    # Two cards joined by an NVLink bridge; two on one PCIe switch with none.
    "2 NVLink": topology(2, [0, 0], [(0, 1, "node", 4)]),
    "2 PCIe": topology(2, [0, 1]),
    # Two NVLink pairs, one per socket.
    "4 pairs": topology(4, [0, 0, 1, 1], [(0, 1, "node", 4), (2, 3, "node", 4)]),
    # One socket, two PCIe switches of two cards, no NVLink.
    "4 PCIe": topology(4, [0, 0, 0, 0],
                       minus(within([[0, 1, 2, 3]], "node"), within([[0, 1], [2, 3]], "single"))),
    # HGX: every card on the NVSwitches (18 links each), four per socket.
    "8 HGX": topology(8, [0] * 4 + [1] * 4, within([[0, 1, 2, 3], [4, 5, 6, 7]], "node"),
                      nvswitch=18),
    # A PCIe tree: per socket two switches of two cards.
    "8 PCIe": topology(8, [0] * 4 + [1] * 4,
                       minus(within([[0, 1, 2, 3], [4, 5, 6, 7]], "node"),
                             within([[0, 1], [2, 3], [4, 5], [6, 7]], "single"))),
    # NVLink bridges across pairs that do not share a switch.
    "8 bridges": topology(8, [0] * 4 + [1] * 4,
                          minus(minus(within([[0, 1, 2, 3], [4, 5, 6, 7]], "node"),
                                      within([[0, 2], [1, 3], [4, 6], [5, 7]], "single")),
                                within([[0, 1], [2, 3], [4, 5], [6, 7]], "node", 4))),
    # Four sockets of eight cards: too many sets of eight to weigh them all
    # (gang.h's GS_GANG_EXACT_SETS), so sets are grown greedily.
    "32 NUMA": topology(32, [i // 8 for i in range(32)],
                        within([list(range(k, k + 8)) for k in range(0, 32, 8)], "node")),
}


class GangHost:
    """A fake host of one of TOPOLOGIES, generated, with the real hook."""

    def __init__(self, tmp: Path, driver_root: Path, doc: Dict[str, Any],
                 placement: str = "binpack", spec_dir: Optional[Path] = None) -> None:
        (tmp / "host").mkdir()
        self.doc = doc
        self.host = Host(tmp / "host", driver_root, doc["gpus"], spec_dir=spec_dir,
                         extra_config=PROFILES + f"placement: {placement}\n")
        self.host.gpus_json.write_text(json.dumps(doc))
        self.hook = self.host.use_real_hook()
        self.db = self.host.tmp / "state.db"
        self.state_dir = self.host.tmp / "state"
        res = self.host.run("cdi", "generate")
        assert res.returncode == 0, res.stderr
        self.index = {g["uuid"]: i for i, g in enumerate(doc["gpus"])}

    def request(self, device: str) -> List[str]:
        """The hook's request for `device`, as the spec gives it (less --preload,
        which admit does not take)."""
        args = self.host.spec_hook(device)[2:]
        if "--preload" in args:
            at = args.index("--preload")
            del args[at:at + 2]
        return args

    def admit(self, cid: str, device: str, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.hook), "admit", "--id", cid, *self.request(device),
                               *extra], capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)

    def placed(self, res: subprocess.CompletedProcess) -> List[int]:
        """The cards an admission printed, in the order placed."""
        assert res.returncode == 0, res.stderr
        return [self.index[line.split()[0]] for line in res.stdout.splitlines()]

    def rows(self, sql: str, *params: object) -> List[tuple]:
        db = acct.Accountant(str(self.db))
        try:
            return [tuple(r) for r in db.db.execute(sql, params)]
        finally:
            db.close()

    def release(self, cid: str) -> None:
        res = subprocess.run([str(self.hook), "release", "--id", cid, "--database", str(self.db),
                              "--state-dir", str(self.state_dir)], capture_output=True,
                             text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert res.returncode == 0, res.stderr


# (topology, placement, what runs first (card, profile), the request, the cards
# it gets, in the order placed). docs/architecture.md's table says the same.
TABLE: List[Tuple[str, str, List[Tuple[int, str]], str, List[int]]] = [
    ("2 NVLink", "binpack", [], "2x8g", [0, 1]),
    ("2 PCIe", "binpack", [], "2x8g", [0, 1]),
    ("4 pairs", "binpack", [], "2x8g", [0, 1]),
    ("4 pairs", "binpack", [(0, "24g")], "2x8g", [0, 1]),  # binpack: the fuller pair
    ("4 pairs", "binpack", [(0, "24g"), (0, "8g")], "2x8g", [2, 3]),  # NVLink over 1+2
    ("4 pairs", "spread", [(0, "8g")], "2x8g", [2, 3]),  # spread: the emptier pair
    ("4 pairs", "binpack", [], "3x8g", [0, 1, 2]),
    ("4 pairs", "binpack", [], "4x8g-30", [0, 1, 2, 3]),
    ("4 PCIe", "binpack", [], "2x8g", [0, 1]),
    ("4 PCIe", "binpack", [(1, "24g"), (1, "8g")], "2x8g", [2, 3]),  # a switch over NUMA
    ("4 PCIe", "binpack", [(1, "24g"), (1, "8g"), (3, "24g"), (3, "8g")], "2x8g", [0, 2]),
    ("8 HGX", "binpack", [], "2x8g", [0, 1]),
    ("8 HGX", "binpack", [(5, "24g")], "2x8g", [4, 5]),  # NUMA node of the fuller card
    ("8 HGX", "spread", [(0, "8g"), (1, "8g"), (2, "8g"), (3, "8g")], "2x8g", [4, 5]),
    ("8 HGX", "binpack", [], "4x8g", [0, 1, 2, 3]),
    ("8 HGX", "binpack", [(6, "24g")], "4x8g", [4, 5, 6, 7]),
    ("8 HGX", "binpack", [], "8x8g", [0, 1, 2, 3, 4, 5, 6, 7]),
    ("8 PCIe", "binpack", [], "2x8g", [0, 1]),
    ("8 PCIe", "binpack", [(0, "24g"), (0, "8g")], "2x8g", [2, 3]),
    ("8 PCIe", "binpack", [], "4x8g", [0, 1, 2, 3]),
    ("8 PCIe", "binpack", [(1, "24g"), (1, "8g")], "4x8g", [4, 5, 6, 7]),  # one socket
    # No socket has four left: two switch pairs, rather than three and one.
    ("8 PCIe", "binpack", [(1, "24g"), (1, "8g"), (5, "24g"), (5, "8g")], "4x8g",
     [2, 3, 6, 7]),
    ("8 bridges", "binpack", [], "2x8g", [0, 1]),  # NVLink over the switch mate
    ("8 bridges", "binpack", [(1, "24g"), (1, "8g")], "2x8g", [2, 3]),
    ("8 bridges", "binpack", [], "4x8g", [0, 1, 2, 3]),
    ("32 NUMA", "binpack", [], "8x8g", list(range(8))),
    ("32 NUMA", "binpack", [(3, "24g"), (3, "8g")], "8x8g", list(range(8, 16))),
    ("32 NUMA", "spread", [(1, "8g")], "4x8g", [0, 2, 3, 4]),  # spread: around card 1
]


def ids(row: Tuple) -> str:
    topo, placement, first, request, _ = row
    held = ",".join(f"{c}:{p}" for c, p in first) or "empty"
    return f"{topo}-{placement}-{held}-{request}"


@pytest.mark.parametrize("row", TABLE, ids=[ids(r) for r in TABLE])
def test_placement_table(tmp_path: Path, driver_root: Path, row: Tuple) -> None:
    topo, placement, first, request, expected = row
    node = GangHost(tmp_path, driver_root, TOPOLOGIES[topo], placement)
    for k, (card, profile) in enumerate(first):
        assert node.placed(node.admit(f"first{k}", f"{card}-{profile}")) == [card]
    res = node.admit("gang", request)
    assert node.placed(res) == expected
    count = int(request.split("x", 1)[0])
    held = node.rows("SELECT c.idx, r.slot, r.memory_mib FROM reservations r JOIN cards c "
                     "ON c.uuid = r.card_uuid WHERE r.container_id='gang' ORDER BY r.slot")
    assert held == [(card, slot, 8 * GIB_MIB) for slot, card in enumerate(expected)]
    assert len(held) == count
    # Twice is the same answer (the hook ran twice), and nothing more is held.
    assert node.placed(node.admit("gang", request)) == expected
    assert len(node.rows("SELECT 1 FROM reservations WHERE container_id='gang'")) == count


def test_topology_is_recorded_from_nvml(tmp_path: Path, driver_root: Path) -> None:
    node = GangHost(tmp_path, driver_root, TOPOLOGIES["8 bridges"])
    cards = node.rows("SELECT idx, pci_bus_id, numa_node, cpu_affinity FROM cards ORDER BY idx")
    assert cards[0] == (0, "00000000:18:00.0", 0, "0-7")
    assert cards[5] == (5, "00000000:1D:00.0", 1, "8-15")
    links = {(node.index[a], node.index[b]): (pcie, n) for a, b, pcie, n in
             node.rows("SELECT card_a, card_b, pcie, nvlinks FROM card_links")}
    assert len(links) == 28
    assert links[(0, 1)] == ("node", 4) and links[(0, 2)] == ("single", 0)
    assert links[(0, 3)] == ("node", 0) and links[(3, 4)] == ("system", 0)
    (tmp_path / "hgx").mkdir()
    hgx = GangHost(tmp_path / "hgx", driver_root, TOPOLOGIES["8 HGX"])
    assert {n for _, _, _, n in hgx.rows("SELECT * FROM card_links")} == {18}
    # A generate that sees the cards again replaces their links.
    doc = dict(TOPOLOGIES["8 bridges"], topology=[])
    node.host.gpus_json.write_text(json.dumps(doc))
    assert node.host.run("cdi", "generate").returncode == 0
    assert {(p, n) for _, _, p, n in node.rows("SELECT * FROM card_links")} == {("system", 0)}


def test_the_spec_offers_gangs_up_to_the_cards_that_fit(tmp_path: Path,
                                                        driver_root: Path) -> None:
    node = GangHost(tmp_path, driver_root, TOPOLOGIES["4 pairs"])
    spec = node.host.spec()
    names = [d["name"] for d in spec["devices"]]
    profiles = ["4g", "4g-30", "32g", "8g", "24g", "8g-30"]  # fakehost's, then ours
    assert [n for n in names if "x" in n.split("-")[0]] == [
        f"{k}x{p}" for p in profiles for k in (2, 3, 4)]
    [dev] = [d for d in spec["devices"] if d["name"] == "2x8g-30"]
    edits = dev["containerEdits"]
    assert "GPUSLICE_MEMORY_LIMIT=8192MiB" in edits["env"]
    assert "GPUSLICE_CORE_LIMIT=30" in edits["env"]
    assert len(edits["deviceNodes"]) == 4  # every card it may be placed on
    assert node.request("2x8g-30")[:12] == ["--device", "2x8g-30", "--memory-mib", "8192",
                                            "--cores", "30", "--priority", "normal",
                                            "--slices", "2", "--database", str(node.db)]


def test_a_gang_larger_than_the_cards_is_bad_input(tmp_path: Path, driver_root: Path) -> None:
    node = GangHost(tmp_path, driver_root, TOPOLOGIES["2 NVLink"])
    args = node.request("2x8g")
    args[args.index("--slices") + 1] = "3"
    res = subprocess.run([str(node.hook), "admit", "--id", "big", *args], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1
    assert ("2x8g: a gang of 3 slices of 8192 MiB needs 3 cards that can hold one, and this "
            "node has 2 (card 0, 1); ask for at most 2 slices") in res.stderr
    assert node.rows("SELECT * FROM reservations") == []


def test_refusal_names_the_request_the_rule_and_the_fix(tmp_path: Path,
                                                        driver_root: Path) -> None:
    node = GangHost(tmp_path, driver_root, TOPOLOGIES["4 pairs"])
    for card in (0, 1, 2):
        assert node.admit(f"big{card}", f"{card}-24g").returncode == 0
        assert node.admit(f"small{card}", f"{card}-8g").returncode == 0
    res = node.admit("gang", "2x8g")
    assert res.returncode == 1, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1
    uuid0 = fake_gpu(0)["uuid"]
    assert lines[0] == (
        "gpuslice-hook: container gang: 2x8g: a gang of 2 slices of 8192 MiB needs 2 cards "
        "with room for one each, and 1 has room now (card 3); the likeliest: card 0 "
        f"({uuid0}) has 0 MiB free of 32768 MiB, 8192 MiB asked; stop a container on it or "
        "ask for less")
    assert node.rows("SELECT * FROM reservations WHERE container_id='gang'") == []
    [(kind, card, detail)] = node.rows("SELECT kind, card_uuid, detail FROM events WHERE "
                                       "container_id='gang'")
    assert (kind, card, json.loads(detail)) == ("refuse", uuid0,
                                                {"device": "2x8g", "reason": "full"})


def test_usage_errors(tmp_path: Path, driver_root: Path) -> None:
    node = GangHost(tmp_path, driver_root, TOPOLOGIES["2 PCIe"])
    base = [str(node.hook), "admit", "--id", "x", "--device", "2x8g", "--database",
            str(node.db), "--state-dir", str(node.state_dir)]
    uuid0 = fake_gpu(0)["uuid"]
    cases = [
        (["--memory-mib", "8192", "--slices", "1"], '--slices "1" is not a whole number from '
                                                    '2 to 16'),
        (["--memory-mib", "8192", "--slices", "17"], '--slices "17" is not a whole number'),
        (["--memory-mib", "8192", "--slices", "two"], '--slices "two" is not a whole number'),
        (["--exclusive", "--slices", "2"], "--slices is a gang of slices"),
        (["--memory-mib", "8192", "--slices", "2", "--card", uuid0],
         "--slices asks for more cards than --card names"),
    ]
    for args, words in cases:
        res = subprocess.run(base + args, capture_output=True, text=True, timeout=30)
        assert res.returncode == 2 and res.stderr.count("\n") == 1, (args, res.stderr)
        assert words in res.stderr, (args, res.stderr)
    assert node.rows("SELECT * FROM reservations") == []


def test_gang_size_bound_is_the_regions_devices() -> None:
    from cdi.profiles import MAX_GANG

    assert MAX_GANG == cheader.constant("GPUSLICE_MAX_DEVICES")


def test_thirty_gangs_at_once_where_ten_fit(tmp_path: Path, driver_root: Path) -> None:
    """4 cards of 40 GiB hold 20 slices of 8 GiB: 10 gangs of two. 30 hooks at once,
    three rounds: exactly 10 admitted each time, every one on two cards, no
    refused gang holding anything (never half of one), the sums right."""
    doc = topology(4, [0, 0, 1, 1], [(0, 1, "node", 4), (2, 3, "node", 4)],
                   memory_mib=40 * GIB_MIB)
    node = GangHost(tmp_path, driver_root, doc)
    for round_ in range(3):
        cids = [f"r{round_}-{i}" for i in range(30)]
        with ThreadPoolExecutor(30) as pool:
            got = dict(zip(cids, pool.map(lambda c: node.admit(c, "2x8g"), cids)))
        admitted = sorted(c for c, r in got.items() if r.returncode == 0)
        refused = [r for r in got.values() if r.returncode != 0]
        assert len(admitted) == 10, [r.stderr for r in refused]
        assert all(r.returncode == 1 and "a gang of 2 slices of 8192 MiB needs 2 cards" in
                   r.stderr and r.stderr.count("\n") == 1 for r in refused)
        held = node.rows("SELECT container_id, card_uuid, slot FROM reservations")
        per: Dict[str, List[Tuple[str, int]]] = {}
        for cid, card, slot in held:
            per.setdefault(cid, []).append((card, slot))
        assert sorted(per) == admitted
        assert all(len(v) == 2 and len({c for c, _ in v}) == 2 and
                   sorted(s for _, s in v) == [0, 1] for v in per.values())
        sums = node.rows("SELECT c.idx, sum(r.memory_mib) FROM cards c JOIN reservations r ON "
                         "r.card_uuid = c.uuid GROUP BY c.idx ORDER BY c.idx")
        assert sums == [(i, 40 * GIB_MIB) for i in range(4)]
        events = node.rows("SELECT kind, count(*) FROM events WHERE container_id LIKE ? "
                           "GROUP BY kind ORDER BY kind", f"r{round_}-%")
        assert events == [("admit", 20), ("refuse", 20)]
        for cid in admitted:
            node.release(cid)
        assert node.rows("SELECT * FROM reservations") == []


def hook_create(node: GangHost, cid: str, device: str, bundle: Path
                ) -> subprocess.CompletedProcess:
    state = {"ociVersion": "1.0.2", "id": cid, "status": "creating", "bundle": str(bundle)}
    return subprocess.run(["unshare", "--mount", "--propagation", "private", str(node.hook),
                           *node.host.spec_hook(device)[1:]], input=json.dumps(state).encode(),
                          capture_output=True, timeout=60)


def test_the_placed_cards_reach_cuda_in_order_each_capped(tmp_path: Path, driver_root: Path,
                                                          fakedriver: Path) -> None:
    """createContainer writes the gang's cards to the placement file by slot; the
    shim shows CUDA those cards in that order, each capped at the slice."""
    subprocess.run(["make", "-s", "-C", str(REPO / "tests" / "shim"), "VARIANT=plain"],
                   check=True)
    subprocess.run(["make", "-s", "-C", str(REPO / "native" / "shim")], check=True)
    node = GangHost(tmp_path, driver_root, TOPOLOGIES["4 pairs"])
    for card in (0, 1):  # the first pair is full: the gang goes to 2 and 3
        assert node.admit(f"full{card}", f"{card}-24g").returncode == 0
        assert node.admit(f"more{card}", f"{card}-8g").returncode == 0
    bundle = make_bundle(tmp_path / "bundle")
    res = hook_create(node, "gang", "2x8g", bundle)
    assert res.returncode == 0, res.stderr
    folder = node.state_dir / "containers" / "gang"
    uuids = [fake_gpu(i)["uuid"] for i in (2, 3)]
    assert (folder / "placement").read_text() == f"2 {uuids[0]}\n3 {uuids[1]}\n"
    env = dict(os.environ, GPUSLICE_FAKE_GPUS=str(node.host.gpus_json),
               LD_LIBRARY_PATH=str(fakedriver),
               LD_PRELOAD=str(REPO / "native" / "shim" / "build" / "libgpuslice.so"),
               GPUSLICE_STATE_DIR=str(folder), GPUSLICE_CARD_DIR=str(node.state_dir / "cards"),
               GPUSLICE_CONTEXT_RESERVE="0", GPUSLICE_MEMORY_LIMIT="8192MiB",
               CUDA_VISIBLE_DEVICES="0")  # the image's own value: the placement wins
    gib = 1 << 30
    out = subprocess.run([str(REPO / "tests" / "shim" / "build-plain" / "cuprog"), "direct",
                          "init", "total", "0", "total", "1", "pctx", "1", "alloc", "6G",
                          "alloc", "4G", "pctx", "0", "alloc", "6G"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [line.split() for line in out.stdout.splitlines()]
    assert lines[1:3] == [["total", "0", str(8 * gib)], ["total", "0", str(8 * gib)]]
    assert lines[4] == ["alloc", "0"] and lines[5][0] == "alloc" and lines[5][1] != "0"
    assert lines[7] == ["alloc", "0"]  # card 0 of the container has its own 8 GiB
    from ocihook import region

    reg = region.read(str(folder / "region"))
    used = {d.uuid: (d.limit_bytes, d.used_bytes) for d in reg.devices if d.uuid}
    assert used == {uuids[0]: (8 * gib, 6 * gib), uuids[1]: (8 * gib, 6 * gib)}
    # `gpuslice status` shows one container on two cards, the gang's.
    st = node.host.run("status", "--json")
    assert st.returncode == 0, st.stderr
    doc = json.loads(st.stdout)
    mine = [(c["index"], k["gang"]) for c in doc["cards"] for k in c["containers"]
            if k["id"] == "gang"]
    assert mine == [(2, {"slices": 2, "slot": 0, "cards": [2, 3]}),
                    (3, {"slices": 2, "slot": 1, "cards": [2, 3]})]
    assert [k["used_mib"] for c in doc["cards"] for k in c["containers"]
            if k["id"] == "gang"] == [6144, 6144]
    assert [(c["numa_node"], c["cpu_affinity"]) for c in doc["cards"]] == [
        (0, "0-7"), (0, "0-7"), (1, "8-15"), (1, "8-15")]
    text = node.host.run("status").stdout
    assert "gang 1 of 2 on cards 2, 3" in text and "gang 2 of 2 on cards 2, 3" in text
    # The exporter: the gang's series per card, each with its slot.
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from ocihook import exporter

    collector = exporter.NodeCollector(str(node.state_dir), str(node.db), None)
    text = generate_latest(exporter.registry(collector)).decode()
    gang = [s for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "gpuslice_container_gang_info"]
    assert sorted((s.labels["card_uuid"], s.labels["slot"], s.labels["slices"],
                   s.labels["profile"], s.labels["container_id"]) for s in gang) == [
        (uuids[0], "0", "2", "8g", "gang"), (uuids[1], "1", "2", "8g", "gang")]
    used = {s.labels["card_uuid"]: s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "gpuslice_container_memory_used_bytes"
            and s.labels["container_id"] == "gang"}
    assert used == {uuids[0]: 6 * gib, uuids[1]: 6 * gib}


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_gang_admit_refuse_release_resize(tmp_path: Path, driver_root: Path, asan: bool) -> None:
    """The gang's paths through the hook, also under ASan and UBSan: admission, the
    same answer twice, a refusal, resize (not for a gang), release."""
    from fakehost import build_hook

    node = GangHost(tmp_path, driver_root, TOPOLOGIES["8 PCIe"])
    if asan:
        node.hook = build_hook(asan=True)
    assert node.placed(node.admit("g", "4x24g")) == [0, 1, 2, 3]
    assert node.placed(node.admit("g", "4x24g")) == [0, 1, 2, 3]
    assert node.placed(node.admit("h", "4x24g")) == [4, 5, 6, 7]
    res = node.admit("late", "2x24g")
    assert res.returncode == 1 and "needs 2 cards with room for one each, and 0 have" in \
        res.stderr, res.stderr
    res = subprocess.run([str(node.hook), "resize", "--id", "g", "--device", "4x24g",
                          "--memory-mib", "8192", "--database", str(node.db), "--state-dir",
                          str(node.state_dir)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "container g holds a gang of 4 slices (4x24g), one per card" in res.stderr
    node.release("g")
    assert node.placed(node.admit("late", "2x24g")) == [0, 1]
    assert sorted(node.rows("SELECT DISTINCT container_id FROM reservations")) == [("h",),
                                                                                ("late",)]
    # The greedy path (too many sets to weigh): 32 cards, a gang of eight.
    (tmp_path / "many").mkdir()
    many = GangHost(tmp_path / "many", driver_root, TOPOLOGIES["32 NUMA"])
    many.hook = node.hook
    assert many.placed(many.admit("g", "8x8g")) == list(range(8))
    assert many.placed(many.admit("h", "16x24g")) == list(range(16))  # two whole sockets


def test_the_largest_gang_reaches_cuda_whole(tmp_path: Path, driver_root: Path,
                                             fakedriver: Path) -> None:
    """A gang of 16 (the region's devices): all 16 placed cards reach CUDA, the
    last one too, capped."""
    subprocess.run(["make", "-s", "-C", str(REPO / "tests" / "shim"), "VARIANT=plain"],
                   check=True)
    subprocess.run(["make", "-s", "-C", str(REPO / "native" / "shim")], check=True)
    node = GangHost(tmp_path, driver_root, topology(17, [0] * 17))
    assert node.admit("one", "0-24g").returncode == 0
    bundle = make_bundle(tmp_path / "bundle")
    res = hook_create(node, "big", "16x8g", bundle)
    assert res.returncode == 0, res.stderr
    folder = node.state_dir / "containers" / "big"
    # binpack: card 0 (the fullest) and the fifteen lowest after it.
    assert [int(line.split()[0]) for line in (folder / "placement").read_text().splitlines()] \
        == list(range(16))
    env = dict(os.environ, GPUSLICE_FAKE_GPUS=str(node.host.gpus_json),
               LD_LIBRARY_PATH=str(fakedriver),
               LD_PRELOAD=str(REPO / "native" / "shim" / "build" / "libgpuslice.so"),
               GPUSLICE_STATE_DIR=str(folder), GPUSLICE_CARD_DIR=str(node.state_dir / "cards"),
               GPUSLICE_CONTEXT_RESERVE="0", GPUSLICE_MEMORY_LIMIT="8192MiB")
    out = subprocess.run([str(REPO / "tests" / "shim" / "build-plain" / "cuprog"), "direct",
                          "init", "total", "15", "total", "16"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [line.split() for line in out.stdout.splitlines()]
    assert lines[1] == ["total", "0", str(8 << 30)]
    assert lines[2][:2] != ["total", "0"]  # a 17th is not there


def test_a_version_4_database_is_upgraded_in_place(tmp_path: Path) -> None:
    """Schema 5 (where cards sit, their links, a reservation's slot) and the
    ones after it are migrations after the four before: a version-4 file
    keeps its rows and reaches the current version."""
    import sqlite3

    path = tmp_path / "state.db"
    db = sqlite3.connect(path, isolation_level=None)
    for script in acct._MIGRATIONS[:4]:
        db.executescript(script)
    db.execute(f"PRAGMA application_id={acct.APPLICATION_ID}")
    db.execute("PRAGMA user_version=4")
    db.execute("INSERT INTO cards(uuid, idx, total_mib, seen) VALUES ('GPU-a', 0, 1024, 0)")
    db.execute("INSERT INTO reservations(container_id, device, card_uuid, memory_mib, cores, "
               "exclusive, created) VALUES ('c', '4g', 'GPU-a', 512, 0, 0, 0)")
    db.close()
    a = acct.Accountant(str(path))
    try:
        [card] = a.cards()
        assert (card.uuid, card.pci_bus_id, card.numa_node, card.cpu_affinity, card.mode) == \
            ("GPU-a", "", None, "", "time")
        [r] = a.reservations("GPU-a")
        assert (r.container_id, r.memory_mib, r.slot) == ("c", 512, 0)
        assert a.links() == []
        assert a.db.execute("PRAGMA user_version").fetchone()[0] == acct.SCHEMA_VERSION
    finally:
        a.close()
