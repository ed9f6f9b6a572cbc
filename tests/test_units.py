"""Memory and compute limits: the accepted forms and every refusal."""
import pytest

from ocihook.units import LimitError, format_mib, parse_cores, parse_memory_mib


@pytest.mark.parametrize("text, mib", [
    ("4GiB", 4096), ("4096MiB", 4096), ("4g", 4096), ("512m", 512), ("4G", 4096),
    ("4Gi", 4096), ("128MiB", 128), (str(256 * 1024 * 1024), 256), (1024 * 1024 * 1024, 1024),
    ("1TiB", 1024 * 1024), (" 2 GiB ", 2048),
])
def test_memory_forms(text, mib):
    assert parse_memory_mib(text) == mib


@pytest.mark.parametrize("text, rule", [
    ("100MiB", "under the minimum of 128 MiB"),
    ("300MiB", "not a multiple of 128 MiB"),
    ("0", "under the minimum"),
    ("1.5GiB", "not a size"),
    ("4 parsecs", "unknown unit"),
    ("-1g", "not a size"),
    ("", "not a size"),
    (str(100 * 1024 * 1024 + 1), "not a whole number of MiB"),
    (True, "not a size"),
])
def test_memory_refusals_name_value_and_rule(text, rule):
    with pytest.raises(LimitError) as e:
        parse_memory_mib(text)
    assert rule in str(e.value)
    if text not in ("", True):
        assert str(text).strip() in str(e.value)


@pytest.mark.parametrize("value, pct", [(None, 0), ("", 0), (0, 0), ("30", 30), (100, 100),
                                        ("50%", 50), (1, 1)])
def test_cores_forms(value, pct):
    assert parse_cores(value) == pct


@pytest.mark.parametrize("value", [101, "101", -1, "x", "3.5", True, 2.5])
def test_cores_refusals(value):
    with pytest.raises(LimitError) as e:
        parse_cores(value)
    assert repr(value) in str(e.value)


def test_format_mib_round_trips():
    for mib in (128, 640, 1024, 4096, 143744):
        assert parse_memory_mib(format_mib(mib)) == mib
    assert format_mib(4096) == "4GiB" and format_mib(640) == "640MiB"
