"""What gpuslice reads from the operator, however the file was made.

The configuration (`--config`, GPUSLICE_CONFIG, /etc/gpuslice/config.yaml)
and CDI spec files: a wrong value, a file that is not text, a FIFO, a link to
a device, a nesting or an alias bomb is one line on stderr naming the file,
the rule and the fix, exit status 2 (1 for `cdi validate`, whose answer is
"no"), and never a traceback or a hang. Each run has a timeout, so that a
reader that blocks fails its test instead of holding the suite.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from ocihook import config as config_mod

MIB = 1 << 20


def gpuslice(*args: str, config: Optional[Path] = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("GPUSLICE_CONFIG", None)
    if config is not None:
        env["GPUSLICE_CONFIG"] = str(config)
    return subprocess.run(["gpuslice", *args], env=env, capture_output=True, text=True,
                          timeout=60)


def one_line_error(res: subprocess.CompletedProcess, path: Path, *parts: str,
                   status: int = 2) -> str:
    assert res.returncode == status, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"gpuslice: error: {path}: "), lines[0]
    for part in parts:
        assert part in lines[0], (part, lines[0])
    return lines[0]


def refused_both_ways(path: Path, *parts: str) -> str:
    """`config check FILE` and any command that loads it (`config show`) say the same line."""
    line = one_line_error(gpuslice("config", "check", str(path)), path, *parts)
    assert one_line_error(gpuslice("config", "show", config=path), path, *parts) == line
    return line


# -- numbers: memory_overcommit ------------------------------------------------

BAD_OVERCOMMIT = [".nan", ".NaN", ".inf", "-.inf", "1.0e+400", "-1", "0", "0.0", "0.5", "0.99",
                  "16.01", "17", "1" + "0" * 40, "'1.5'", "yes", "no", "null", "[1.5]",
                  "{a: 1}", "2001-12-14"]


@pytest.mark.parametrize("value", BAD_OVERCOMMIT)
def test_overcommit_outside_what_the_hook_takes_is_refused(tmp_path, value):
    path = tmp_path / "config.yaml"
    path.write_text(f"memory_overcommit: {value}\n")
    refused_both_ways(path, "memory_overcommit ", "is not a number from 1.0 to 16.0",
                      "write e.g. 1.0 for none or 1.5")


BAD_CORES_LIMIT = ["0", "101", "50.5", "-1", ".nan", ".inf", "yes", "'80'", "[80]", "null",
                   "1" + "0" * 40]


@pytest.mark.parametrize("value", BAD_CORES_LIMIT)
def test_cores_limit_outside_the_policy_rule_is_refused(tmp_path, value):
    path = tmp_path / "config.yaml"
    path.write_text(f"cores_limit: {value}\n")
    refused_both_ways(path, "cores_limit ", "is not a whole number from 1 to 100",
                      "write e.g. 100 for no limit or 80")


@pytest.mark.parametrize("value, kept", [("1", 1), ("80", 80), ("100", 100), ("50.0", 50)])
def test_cores_limit_inside_the_rule_is_kept(tmp_path, value, kept):
    path = tmp_path / "config.yaml"
    path.write_text(f"cores_limit: {value}\n")
    cfg = config_mod.check_file(str(path))
    assert cfg.cores_limit == kept and cfg.policy().cores_limit == kept


def test_status_on_a_nan_overcommit_is_the_same_line(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(f"database: {tmp_path / 'state.db'}\nstate_dir: {tmp_path / 'state'}\n"
                    "memory_overcommit: .nan\n")
    one_line_error(gpuslice("status", config=path), path, "memory_overcommit nan is not a number")
    one_line_error(gpuslice("status", "--json", config=path), path, "memory_overcommit nan")


@pytest.mark.parametrize("value, taken", [("1", True), ("1.0", True), ("1.5", True),
                                          ("16", True), ("16.0", True), ("0.99", False),
                                          ("16.01", False)])
def test_config_check_and_the_accountant_draw_the_same_line(tmp_path, driver_root, fakedriver,
                                                            value, taken):
    """What config check passes, `cdi generate` records in the accountant and
    gpuslice-hook admits by; just past either end, config check and config
    apply refuse, and the accountant's policy table would not take it either."""
    import sqlite3

    from test_hook import Node

    from ocihook import accountant as acct

    node = Node(tmp_path, driver_root, fakedriver)  # generated with the default policy
    with open(node.config, "a") as f:
        f.write(f"memory_overcommit: {value}\n")
    res = gpuslice("config", "check", str(node.config))
    assert (res.returncode == 0) is taken, res.stderr
    if taken:
        node.generate()
        a = acct.Accountant(str(node.db))
        assert a.policy().memory_overcommit == float(value)
        a.close()
        res = node.create("c1", "0-6g")
        assert res.returncode == 0, res.stderr
        return
    one_line_error(gpuslice("config", "apply", config=node.config), node.config,
                   f"memory_overcommit {float(value)!r} is not a number from 1.0 to 16.0")
    db = sqlite3.connect(node.db)
    assert db.execute("SELECT memory_overcommit FROM policy").fetchall() == [(1.0,)]
    with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
        db.execute("UPDATE policy SET memory_overcommit = ?", (float(value),))
    db.close()


# -- numbers: a profile's memory and cores --------------------------------------

PROFILE_NUMBERS = [
    ("memory", ".nan", "memory nan is not a size; use e.g. 4GiB"),
    ("memory", ".inf", "memory inf is not a size"),
    ("memory", "-1", "memory '-1' is not a size"),
    ("memory", "1.5", "memory 1.5 is not a size"),
    ("memory", "yes", "memory True is not a size"),
    ("memory", "null", "memory None is not a size"),
    ("memory", "[4g]", "memory ['4g'] is not a size"),
    ("memory", "'4 GiB'", ""),  # accepted: spaces are allowed (tests/test_units.py)
    ("memory", "'" + "9" * 5000 + "'", "has more digits than any GPU's memory needs"),
    ("memory", "'\u00b2GiB'", "is not a size"),
    ("cores", ".nan", "cores nan is not a whole percent from 0 to 100; write e.g. 30 or 30%"),
    ("cores", ".inf", "cores inf is not a whole percent"),
    ("cores", "-.inf", "cores -inf is not a whole percent"),
    ("cores", "-1", "cores -1 is out of range; it must be 1 to 100"),
    ("cores", "101", "cores 101 is out of range"),
    ("cores", "30.5", "cores 30.5 is not a whole percent"),
    ("cores", "yes", "cores True is not a whole percent"),
    ("cores", "'\u00b2'", "cores '\u00b2' is not a whole percent"),  # isdigit() says yes
    ("cores", "'" + "9" * 5000 + "'", "is not a whole percent"),
    ("cores", "[30]", "cores [30] is not a whole percent"),
]


@pytest.mark.parametrize("key, value, message", PROFILE_NUMBERS)
def test_profile_numbers(tmp_path, key, value, message):
    path = tmp_path / "config.yaml"
    other = {"memory": "4GiB", "cores": "30"}
    other[key] = value
    path.write_text(f"profiles:\n  - {{name: p, memory: {other['memory']}, "
                    f"cores: {other['cores']}}}\n")
    if not message:
        assert gpuslice("config", "check", str(path)).returncode == 0
        return
    refused_both_ways(path, "profiles[0]: ", message)


def test_an_integer_of_thousands_of_digits(tmp_path):
    """Python 3.11 refuses to convert it (sys.set_int_max_str_digits): a YAML
    error that says where; an older Python reads it, and cores says no."""
    path = tmp_path / "config.yaml"
    path.write_text("profiles:\n  - {name: p, memory: 4GiB, cores: " + "9" * 5000 + "}\n")
    if hasattr(sys, "get_int_max_str_digits"):
        refused_both_ways(path, "line 2, column 36: '9999", "cannot be read as int",
                          "quote it if it is meant as text")
    else:
        refused_both_ways(path, "profiles[0]: cores 9999", "is out of range")


def test_a_path_with_a_nul_is_refused(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text('state_dir: "/run/gpu\\0slice"\n')
    refused_both_ways(path, "state_dir: '/run/gpu\\x00slice' holds a NUL character")


@pytest.mark.parametrize("key", ["state_dir", "database", "spec_dir"])
@pytest.mark.parametrize("char, shown", [("\n", "'\\n'"), ("\r", "'\\r'"),
                                         ("\x1b", "'\\x1b'")])
def test_a_path_with_a_newline_or_control_is_refused(tmp_path, key, char, shown):
    path = tmp_path / "config.yaml"
    path.write_text(f"{key}: {json.dumps('/run/gpu' + char + 'slice')}\n")
    refused_both_ways(path, f"{key}: '/run/gpu{shown[1:-1]}slice' holds the control character "
                      f"{shown}, which no path of gpuslice's may hold", "; remove it")


# -- every problem at once ------------------------------------------------------

def test_config_check_says_every_problem_of_a_file(tmp_path):
    """Three errors of three kinds in one run, each one line with its fix; a
    command that loads the file says the first only."""
    path = tmp_path / "config.yaml"
    path.write_text("spec_dri: /etc/cdi\ncores_limit: 101\nprofiles:\n"
                    "  - {name: a, memory: 3000MiB}\n  - {name: b, memory: 4GiB, cores: 130}\n"
                    "  - {name: c, memory: 4GiB, colour: red}\n")
    res = gpuslice("config", "check", str(path))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.splitlines()
    assert lines == [
        f"gpuslice: error: {path}: cores_limit 101 is not a whole number from 1 to 100 (the "
        "sum of compute caps, in percent, that the slices of one card may carry); write e.g. "
        "100 for no limit or 80",
        f"gpuslice: error: {path}: profiles[0]: memory '3000MiB' is not a multiple of 128 MiB: "
        "write 2944MiB or 3GiB",
        f"gpuslice: error: {path}: profiles[1]: cores 130 is out of range; it must be 1 to 100 "
        "(0 or empty for no cap)",
        f"gpuslice: error: {path}: (top level): unknown key 'spec_dri'; did you mean "
        "'spec_dir'?",
        f"gpuslice: error: {path}: profiles[2]: unknown key 'colour'; known keys are "
        "cores, memory, name, priority",
    ], res.stderr
    first = one_line_error(gpuslice("config", "show", config=path), path)
    assert first == lines[0]


def test_names_are_checked_with_the_values_once_the_structure_holds(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("profiles:\n  - {name: 2x4g, memory: 4GiB}\n  - {name: p, memory: 4GiB}\n"
                    "  - {name: p, memory: 100m}\n")
    res = gpuslice("config", "check", str(path))
    assert res.returncode == 2
    assert [ln.split(f"{path}: ", 1)[1] for ln in res.stderr.splitlines()] == [
        "profiles[2]: memory '100m' is under the minimum of 128 MiB; write 128MiB or more",
        "profiles[0]: profile name '2x4g' starts with a number and 'x', the form of a gang's device (2x4g: "
        "two slices of 4g); name it otherwise, e.g. 4g",
        "profiles[2]: profile name 'p' is already used by profiles[1]; profile names must be "
        "unique",
    ], res.stderr


@pytest.mark.parametrize("value, fix", [("4097MiB", "write 4GiB or 4224MiB"),
                                        ("129m", "write 128MiB or 256MiB"),
                                        ("3000000000", "write 2816MiB or 2944MiB")])
def test_a_size_off_the_grain_is_given_its_nearest(tmp_path, value, fix):
    path = tmp_path / "config.yaml"
    path.write_text(f"profiles:\n  - {{name: p, memory: {value}}}\n")
    refused_both_ways(path, "profiles[0]: ", fix)


# -- the file itself ------------------------------------------------------------

def test_a_file_starting_with_a_byte_order_mark_is_refused(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_bytes(b"\xef\xbb\xbfmemory_overcommit: 1.0\n")
    refused_both_ways(path, "the file starts with a byte-order mark (bytes EF BB BF), which a "
                      "configuration may not hold; save the file as UTF-8 without a BOM")
    path.write_bytes(b"memory_overcommit: 1.0\n")
    assert gpuslice("config", "check", str(path)).returncode == 0


def test_a_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_bytes(b"profiles: [{name: a, memory: \xff\xfe}]\n")
    refused_both_ways(path, "byte 0xff at offset 29 is not UTF-8; save the file as UTF-8 text")


@pytest.mark.parametrize("text", [
    "profiles: " + "[" * 5000 + "]" * 5000 + "\n",
    "profiles: " + "{a: " * 5000 + "}" * 5000 + "\n",
    "profiles:\n" + "- " * 5000 + "x\n",  # block sequences, each inside the one before
    "".join(" " * i + "a:\n" for i in range(100)),  # block mappings, by indentation
], ids=["flow-sequences", "flow-mappings", "block-sequences", "block-mappings-100"])
def test_nesting_5000_deep(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    refused_both_ways(path, "nested more than 64 collections deep", "is this the right file?")


def test_nesting_up_to_the_bound_is_read(tmp_path):
    """64 deep is parsed (and refused by the schema, for what it holds)."""
    path = tmp_path / "config.yaml"
    path.write_text("profiles: " + "[" * 63 + "]" * 63 + "\n")
    refused_both_ways(path, "profiles[0]: [[[[", "is not of type 'object'")


def test_a_link_to_dev_zero(tmp_path):
    path = tmp_path / "config.yaml"
    path.symlink_to("/dev/zero")
    refused_both_ways(path, "is a character device, not a regular file",
                      "name the file itself (a symbolic link to one is followed)")


def test_a_link_to_a_good_file_is_followed(tmp_path):
    (tmp_path / "real.yaml").write_text("placement: spread\n")
    path = tmp_path / "config.yaml"
    path.symlink_to("real.yaml")
    assert gpuslice("config", "check", str(path)).returncode == 0
    assert 'placement: "spread"' in gpuslice("config", "show", config=path).stdout


def test_a_fifo_is_refused_at_once(tmp_path):
    path = tmp_path / "config.yaml"
    os.mkfifo(path)
    refused_both_ways(path, "is a FIFO, not a regular file")


def test_a_folder(tmp_path):
    path = tmp_path / "config.yaml"
    path.mkdir()
    refused_both_ways(path, "is a folder, not a regular file")


def test_the_size_bound(tmp_path):
    """At most 1 MiB is read (docs/configuration.md): one byte more is refused
    before it is parsed, exactly 1 MiB is read."""
    assert config_mod.MAX_BYTES == MIB
    path = tmp_path / "config.yaml"
    head = "placement: spread\n"
    path.write_text(head + "#" * (MIB - len(head) - 1) + "\n")
    assert path.stat().st_size == MIB
    assert gpuslice("config", "check", str(path)).returncode == 0
    with open(path, "a") as f:
        f.write("\n")
    refused_both_ways(path, "is larger than 1 MiB", "a configuration is a few KiB")


BILLION_LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]\n" for p, c in zip("abcdefgh", "bcdefghi"))


def test_an_alias_bomb(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(BILLION_LAUGHS)
    refused_both_ways(path, "line 1, column 4: YAML anchor or alias &a is not accepted in this "
                            "file; write the value out in full where it is used")


def test_anchors_and_aliases_are_refused_even_when_harmless(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("profiles:\n  - &p {name: a, memory: 1g}\n  - *p\n")
    refused_both_ways(path, "line 2, column 5: YAML anchor or alias &p")
    path.write_text("profiles:\n  - {name: a, memory: 1g}\n  - <<: *p\n")
    refused_both_ways(path, "line 3, column 9: YAML anchor or alias *p")


# -- CDI spec files: the same reader, aliases bounded --------------------------

SPEC = ("cdiVersion: 0.6.0\nkind: vendor.com/gpu\n"
        "devices:\n- name: gpu0\n  containerEdits:\n    env: &env [A=1]\n"
        "- name: gpu1\n  containerEdits:\n    env: *env\n")


def test_cdi_validate_on_what_is_not_a_spec_file(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.yaml"
    zero.symlink_to("/dev/zero")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("cdiVersion: 0.6.0\nkind: vendor.com/gpu\n" + BILLION_LAUGHS)
    for path, rule in ((fifo, "is a FIFO, not a regular file"),
                       (zero, "is a character device, not a regular file"),
                       (bomb, "aliases stand for more than 100000 values")):
        res = gpuslice("cdi", "validate", str(path))
        assert res.returncode == 1, res.stderr
        [line] = res.stderr.strip().splitlines()
        assert line.startswith(f"{path}: ") and rule in line, line
    # Anchors are YAML, and a CDI spec is YAML: a modest one is read.
    good = tmp_path / "anchors.yaml"
    good.write_text(SPEC)
    res = gpuslice("cdi", "validate", str(good))
    assert res.returncode == 0 and "2 devices" in res.stdout, res.stderr


def test_cdi_list_passes_over_a_fifo_in_a_spec_dir(tmp_path):
    (tmp_path / "good.yaml").write_text(SPEC)
    os.mkfifo(tmp_path / "planted.yaml")
    res = gpuslice("cdi", "list", "--spec-dir", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["vendor.com/gpu=gpu0", "vendor.com/gpu=gpu1"]
    assert "planted.yaml: is a FIFO, not a regular file" in res.stderr


# -- fuzz: always a Config or the one line --------------------------------------

VALID = """cdi_kind: gpuslice.io/gpu
spec_dir: /etc/cdi
driver_root: /
memory_overcommit: 1.5
placement: binpack
preload: env
profiles:
  - {name: 2g, memory: 2GiB}
  - {name: 4g-30, memory: 4GiB, cores: 30}
  - name: 8g-50-hi
    memory: 8GiB
    cores: "50%"
    priority: high
"""
# What a YAML file can hold that a reader may trip on.
TOKENS = ["&a ", "*a", "&a [*a, *a]", "[", "]", "{", "}", ": ", "- ", "? ", "<<: ", ",", "\n",
          "  ", "\t", "'", '"', "#", "|\n", ">\n", "---\n", "...\n", "%YAML 1.1\n", "\\", "@",
          ".nan", ".inf", "-.inf", "1.0e+400", "yes", "no", "null", "~", "0x", "-1", "0.5",
          "2001-13-01", "1" * 5000, "9" * 30, "\u00b2", "\x00", "\ufeff", "\r\n",
          "!!binary ", "!!timestamp ", "!!timestamp x", "!!int ", "!!float ", "!!set ", "!!str ",
          "!!map ", "!!seq ", "!!omap ", "!!pairs ", "!!python/object ", "!<tag:x> ",
          "memory_overcommit: ", "cores: ", "memory: ", "profiles: ", "priority: ", "name: "]


def mutated(rng: random.Random, text: str) -> bytes:
    data = bytearray(text.encode())
    for _ in range(rng.choice((1, 1, 1, 2, 3, 6))):  # mostly one change: many still pass
        op, at = rng.random(), rng.randint(0, len(data))
        if op < 0.35:
            data[at:at] = (rng.choice(TOKENS).encode() if rng.random() < 0.95
                           else bytes([rng.randrange(256)]))
        elif op < 0.55:
            del data[at:at + rng.randint(1, 20)]
        elif op < 0.75 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        else:
            src = rng.randint(0, len(data))
            data[at:at] = data[src:src + rng.randint(1, 40)]
    return bytes(data)


def test_fuzz_the_configuration_loader(tmp_path):
    """4000 files (a quarter random bytes, the rest a valid configuration
    mutated): each is a Config or a ConfigError of one line that starts
    with the file's name; anything else fails with the case that caused it."""
    rng = random.Random(20261201)
    path = tmp_path / "config.yaml"
    outcomes = {"valid": 0, "refused": 0}
    for i in range(4000):
        data = (bytes(rng.randrange(256) for _ in range(rng.randint(0, 200))) if i % 4 == 0
                else mutated(rng, VALID))
        path.write_bytes(data)
        try:
            cfg = config_mod.check_file(str(path))
            cfg.hook_create_args()
            cfg.policy()
            outcomes["valid"] += 1
        except config_mod.ConfigError as e:
            assert e.problems[0] == str(e), (data, e.problems)
            for line in e.problems:
                assert "\n" not in line and line.startswith(f"{path}: "), (data, line)
            outcomes["refused"] += 1
        except BaseException as e:  # noqa: BLE001 - the case is the report
            pytest.fail(f"{type(e).__name__}: {e} on {data!r}")
    # Both kinds of outcome are exercised, or the fuzz proves little.
    assert outcomes["valid"] > 40 and outcomes["refused"] > 1000, outcomes


def test_fuzz_the_spec_reader():
    from cdi.spec import SpecError
    from cdi.specfile import parse_spec

    rng = random.Random(20261202)
    outcomes = {"valid": 0, "refused": 0}
    for _ in range(2000):
        text = mutated(rng, SPEC).decode("utf-8", "replace")
        try:
            parse_spec(text, "spec.yaml").to_dict()
            outcomes["valid"] += 1
        except SpecError as e:
            assert "\n" not in str(e) and str(e).startswith("spec.yaml: "), (text, str(e))
            outcomes["refused"] += 1
        except BaseException as e:  # noqa: BLE001 - the case is the report
            pytest.fail(f"{type(e).__name__}: {e} on {text!r}")
    assert outcomes["valid"] > 20 and outcomes["refused"] > 500, outcomes


def test_the_overcommit_range_is_said_once():
    """config.py owns it (parse_memory_overcommit); the schema only types the key."""
    schema = config_mod.schema()["properties"]["memory_overcommit"]
    assert schema["type"] == "number" and not {"minimum", "maximum"} & set(schema)


def test_the_policy_rules_are_the_schema_s_and_the_table_s(tmp_path):
    """ocihook/policy.py owns the rules: the configuration's schema offers its
    placements, and the accountant's policy table takes its ranges and no more."""
    import json
    import sqlite3

    from ocihook import accountant as acct
    from ocihook import policy

    schema = json.loads(config_mod.SCHEMA_PATH.read_text())
    assert tuple(schema["properties"]["placement"]["enum"]) == policy.PLACEMENTS
    a = acct.Accountant(str(tmp_path / "state.db"))
    for placement in policy.PLACEMENTS:
        for overcommit in (policy.OVERCOMMIT_MIN, policy.OVERCOMMIT_MAX):
            for cores in (policy.CORES_LIMIT_MIN, policy.CORES_LIMIT_MAX):
                a.set_policy(policy.Policy(placement, overcommit, cores))
                assert a.policy() == policy.Policy(placement, overcommit, cores)
    a.close()
    db = sqlite3.connect(tmp_path / "state.db")
    for column, value in (("placement", "random"),
                          ("memory_overcommit", policy.OVERCOMMIT_MIN - 0.01),
                          ("memory_overcommit", policy.OVERCOMMIT_MAX + 0.01),
                          ("cores_limit", policy.CORES_LIMIT_MIN - 1),
                          ("cores_limit", policy.CORES_LIMIT_MAX + 1)):
        with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
            db.execute(f"UPDATE policy SET {column} = ?", (value,))
    db.close()


# -- card_modes ----------------------------------------------------------------

@pytest.mark.parametrize("text, message", [
    ("card_modes: [0]\n", "card_modes [0] is not a mapping of cards to modes; write e.g."),
    ("card_modes: {0: MPS}\n", "card_modes: card 0: 'MPS' is not a mode: write time or mps"),
    ("card_modes: {0: true}\n", "card_modes: card 0: True is not a mode"),
    ("card_modes: {gpu0: mps}\n", "card_modes: 'gpu0' is not a card: name one by its index"),
    ("card_modes: {-1: mps}\n", "card_modes: -1 is not a card"),
    ("card_modes: {0: mps, '0': time}\n", "card_modes: card 0 is named twice; keep one entry"),
])
def test_card_modes_outside_the_rule_are_refused(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    refused_both_ways(path, message)


def test_card_modes_by_index_and_uuid_are_kept(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("card_modes: {0: mps, GPU-1234: time}\n")
    res = gpuslice("config", "check", str(path))
    assert res.returncode == 0, res.stderr
    cfg = config_mod.load(str(path))
    assert cfg.card_modes == {"0": "mps", "GPU-1234": "time"}
    assert cfg.mode_of(0, "GPU-x") == "mps" and cfg.mode_of(1, "GPU-1234") == "time"
    assert cfg.mode_of(2, "GPU-y") == "time"  # the default
