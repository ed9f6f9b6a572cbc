"""docs/architecture.md's table of parts stays true to the tree: every source
file of native/, cdi/ and ocihook/ is named in its folder's row (under its
subfolder's name, where the row names subfolders), and every file the
document names exists. A file added, moved or removed without the table
fails here."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Dict, List, Set

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "architecture.md"
SOURCE_SUFFIXES = (".c", ".h", ".py", ".proto")
FOLDERS = ("native/", "cdi/", "ocihook/")
# A named file: a backticked token ending in one of these.
# Files of the host or of other programs that the document names as such.
HOST_FILES = {"config.json", "daemon.json"}
FILE_TOKEN = re.compile(r"`([\w./-]+\.(?:c|h|py|proto|json|md))`")


def tracked() -> List[str]:
    out = subprocess.run(["git", "ls-files", *FOLDERS], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    return out.split()


def sources() -> List[str]:
    """The files a reader must find in the table: code and its contracts, not
    generated code (protoc's, named by its folder's row), fuzz corpora or
    package markers."""
    return [p for p in tracked()
            if p.endswith(SOURCE_SUFFIXES) and "/corpus/" not in p
            and not p.endswith("__init__.py") and not re.search(r"_pb2(_grpc)?\.py$", p)]


def parts_rows() -> Dict[str, str]:
    """folder -> its row's text, from the table under "## Parts"."""
    text = DOC.read_text()
    section = text.split("## Parts", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `([^`]+/)` \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def subfolders(tree: List[str], folder: str) -> Set[str]:
    return {p[len(folder):].split("/", 1)[0] for p in tree
            if p.startswith(folder) and "/" in p[len(folder):]}


def segment(text: str, sub: str, siblings: Set[str]) -> str:
    """The part of a row about subfolder sub: from its name (`sub/`) to the
    next sibling's name, or "" if the row does not name it."""
    start = text.find(f"`{sub}/`")
    if start < 0:
        return ""
    ends = [i for s in siblings - {sub}
            for i in [text.find(f"`{s}/`", start + 1)] if i > start]
    return text[start:min(ends, default=len(text))]


def is_named(path: str, rows: Dict[str, str], tree: List[str]) -> bool:
    folder = max((f for f in rows if path.startswith(f)), key=len, default=None)
    if folder is None:
        return False
    text, rel = rows[folder], path[len(folder):]
    if f"`{rel}`" in text:
        return True
    level = folder
    parts = rel.split("/")
    for sub in parts[:-1]:
        text = segment(text, sub, subfolders(tree, level))
        level += sub + "/"
    name = parts[-1]
    stem_c = name[:-2] + ".c" if name.endswith(".h") else None
    return f"`{name}`" in text or (stem_c is not None and f"`{stem_c}`" in text)


def test_every_source_file_is_in_its_folders_row() -> None:
    rows, tree = parts_rows(), tracked()
    missing = [p for p in sources() if not is_named(p, rows, tree)]
    assert missing == [], "docs/architecture.md's Parts table does not name: " + ", ".join(missing)


def test_every_file_the_document_names_exists() -> None:
    tree = set(subprocess.run(["git", "ls-files"], cwd=REPO, check=True, capture_output=True,
                              text=True).stdout.split())
    basenames = {p.rsplit("/", 1)[-1] for p in tree}
    absent = []
    for name in sorted(set(FILE_TOKEN.findall(DOC.read_text())) - HOST_FILES):
        if name.startswith("/"):
            continue  # a path on the host, not of the project
        if "/" in name:
            found = name in tree or any(p.endswith("/" + name) for p in tree)
        else:
            found = name in basenames
        if not found:
            absent.append(name)
    assert absent == [], "docs/architecture.md names files the tree lacks: " + ", ".join(absent)


def test_the_check_sees_a_missing_file() -> None:
    """The matcher itself: a file the row does not name is found missing, one
    under the wrong subfolder too."""
    rows = {"native/hook/": "`hook/` is the hook (`main.c`); `runtime/` the wrapper (`args.c`)"}
    tree = ["native/hook/hook/main.c", "native/hook/hook/args.c", "native/hook/runtime/args.c"]
    assert is_named("native/hook/hook/main.c", rows, tree)
    assert is_named("native/hook/runtime/args.c", rows, tree)
    assert not is_named("native/hook/hook/args.c", rows, tree)
