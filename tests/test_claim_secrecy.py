"""What a claim shows and who may take or give it back (issue 27, G2 and G3).

G2: a claim's token is a secret the task's container proves itself with; the
id of its row is shown (the exporter's labels, `gpuslice status`, events,
the plugin's log), so the id is the token's hash and nothing shown holds
the token. What is shown does not let a container take the row.
G3: a container id that a starter picks (runc, ctr) can start with "claim-":
the hook refuses it, and the plugin gives back only claims it made and
still holds, never a container's row under such an id.
All with the plugin under go-plugin's client and this tree's gpuslice-hook.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from nomad_harness import PluginClient
from test_claim_hook import admit, card_uuid, claim_row, claimed_bundle
from test_hook import Node, err, rows
# The plugin's fixtures (the client, the node, a started plugin) are theirs.
from test_nomad_device import (client, groups, ids, next_fingerprint_where,  # noqa: F401
                               node, nomad_client, start)


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


def test_a_starter_chosen_claim_id_is_refused_by_the_hook(node: Node) -> None:
    for cid in ("claim-mine", claim_row("0" * 32)):
        res = node.create(cid, "0-6g", pid=os.getpid())
        assert res.returncode == 2, res.stderr
        assert err(res) == (f"gpuslice-hook: error: container id \"{cid}\" in the OCI state "
                            "starts with \"claim-\", which gpuslice keeps for "
                            "gpuslice-nomad-device's reservations; start the container under "
                            "another id")
    assert rows(node.db, "SELECT count(*) FROM reservations") == [(0,)]
    # An id that only contains the word is any container's.
    assert node.create("my-claim-1", "0-6g", pid=os.getpid()).returncode == 0


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
