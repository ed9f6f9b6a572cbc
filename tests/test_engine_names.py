"""Names people know: Podman and Docker record no name where the hook reads
(config.json), so status, top, the exporter and resize read them from the
engines' own stores (ocihook/engine_names.py). Real Podman here; Docker's
real daemon in tests/test_runtime_e2e.py. The stores are read as files that
a tenant's name reaches: hostile content is no name, never an error."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fakehost import Host
from ocihook import engine_names
from test_podman_admission import node, podman  # noqa: F401  (fixtures: Podman's store named)


def start(podman, name: str, device: str) -> str:
    res = podman.run(["sleep", "600"], devices=[f"gpuslice.io/gpu={device}"],
                     extra_args=["--detach", "--name", name], timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_podman_names_in_status_top_and_resize(podman, node: Host) -> None:
    cid = start(podman, "inference", "0-6g")
    doc = json.loads(node.run("status", "--json").stdout)
    assert [(k["id"], k["name"]) for k in doc["cards"][0]["containers"]] == [(cid, "inference")]
    assert f"  {cid[:12]} (inference)  0-6g" in node.run("status").stdout
    top = node.run("top", "--once")
    assert top.returncode == 0, top.stderr
    assert any(line.split()[:2] == [cid[:12], "inference"] for line in top.stdout.splitlines())
    # resize by the name Podman gave it.
    res = node.run("resize", "inference", "--memory", "8g")
    assert res.returncode == 0, res.stderr
    doc = json.loads(node.run("status", "--json").stdout)
    k = doc["cards"][0]["containers"][0]
    assert (k["memory_mib"], k["resized"]) == (8192, True)
    # The device it asked for stays its name; the new size is said beside it.
    assert f"  {cid[:12]} (inference)  0-6g       resized to 8192 MiB; " \
        in node.run("status").stdout


def test_a_name_equal_to_another_id_prefix_is_refused(podman, node: Host) -> None:
    """A tenant's --name never wins over an id: one that is another
    container's id prefix is ambiguous, and refused with the candidates."""
    first = start(podman, "first", "0-6g")
    second = start(podman, first[:8], "0-6g")
    res = node.run("resize", first[:8], "--memory", "4g")
    assert res.returncode == 2
    assert "matches 2 containers" in res.stderr
    assert f"{first[:12]} (id prefix)" in res.stderr and f"{second[:12]} (name)" in res.stderr
    assert node.run("resize", first, "--memory", "4g").returncode == 0  # the full id wins


# -- the stores as files ------------------------------------------------------

def podman_store(root: Path, doc: object) -> None:
    folder = root / "overlay-containers"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "containers.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))


def docker_store(root: Path, cid: str, doc: object) -> None:
    folder = root / "containers" / cid
    folder.mkdir(parents=True)
    (folder / "config.v2.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))


def test_both_stores_are_read(tmp_path: Path) -> None:
    podman_store(tmp_path / "pm", [{"id": "a" * 64, "names": ["web"]},
                                   {"id": "b" * 64, "names": ["db", "alias"]}])
    docker_store(tmp_path / "dk", "c" * 64, {"Name": "/worker", "ID": "c" * 64})
    found = engine_names.names(["a" * 64, "b" * 64, "c" * 64, "d" * 64],
                               str(tmp_path / "pm"), str(tmp_path / "dk"))
    assert found == {"a" * 64: "web", "b" * 64: "db", "c" * 64: "worker"}
    assert engine_names.names([], "/nonexistent", "/nonexistent") == {}


@pytest.mark.parametrize("doc", [
    "{not json", "[1, 2]", '{"id": "x"}', [{"id": 7, "names": ["n"]}],
    [{"id": "a" * 64, "names": "web"}], [{"id": "a" * 64, "names": []}],
    [{"id": "a" * 64, "names": [7]}], [{"id": "a" * 64, "names": ["x" * 300]}],
    [{"id": "a" * 64, "names": [""]}],
])
def test_a_podman_store_that_says_no_name_is_none(tmp_path: Path, doc: object) -> None:
    podman_store(tmp_path, doc)
    assert engine_names.names(["a" * 64], str(tmp_path), "/nonexistent") == {}


@pytest.mark.parametrize("doc", ["{", '"/web"', {"Name": 7}, {"Name": "/"}, {"Name": ""},
                                 {"Name": "/" + "x" * 300}, {}])
def test_a_docker_store_that_says_no_name_is_none(tmp_path: Path, doc: object) -> None:
    docker_store(tmp_path, "c" * 64, doc)
    assert engine_names.names(["c" * 64], "/nonexistent", str(tmp_path)) == {}


def test_an_id_is_never_a_path_and_a_fifo_is_never_waited_on(tmp_path: Path) -> None:
    docker_store(tmp_path / "dk", "real", {"Name": "/outside"})
    assert engine_names.names(["../containers/real", "..", "."], "/nonexistent",
                              str(tmp_path / "dk" / "x")) == {}
    (tmp_path / "pm" / "vfs-containers").mkdir(parents=True)
    os.mkfifo(tmp_path / "pm" / "vfs-containers" / "containers.json")
    assert engine_names.names(["a" * 64], str(tmp_path / "pm"), "/nonexistent") == {}
