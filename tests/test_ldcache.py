"""Tests for cdi.ldcache against caches written by the real ldconfig.

A temporary root holds small ELF libraries built with gcc; ``ldconfig -r``
writes its cache in each format (new, old, compat) and ``ldconfig -p`` says
what that cache holds, which the reader must reproduce entry for entry.
Hand-built caches cover what ldconfig will not write here: big-endian files,
32-bit entries ahead of 64-bit ones, and corrupt files.
"""
from __future__ import annotations

import os
import random
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import pytest

from cdi.ldcache import (
    FLAG_AARCH64_LIB64,
    FLAG_ELF,
    FLAG_ELF_LIBC6,
    FLAG_X8664_LIB64,
    HWCAP_EXTENSION,
    NATIVE_FLAGS,
    LdCacheEntry,
    LdCacheError,
    native_flags,
    native_libraries,
    parse_ld_cache,
    read_ld_cache,
)

LDCONFIG = shutil.which("ldconfig") or "/sbin/ldconfig"
X86_64 = FLAG_ELF_LIBC6 | FLAG_X8664_LIB64
MULTIARCH = "/usr/lib/x86_64-linux-gnu"
NVIDIA_DIR = "/usr/local/nvidia/lib64"
LIB32_DIR = "/usr/lib32"
HWCAPS_DIR = MULTIARCH + "/glibc-hwcaps/x86-64-v3"
FORMATS = ("new", "old", "compat")

# ldconfig -p prints "\tNAME (DESCRIPTION) => PATH" per entry.
_LINE = re.compile(r"^\t(?P<name>\S+) \((?P<desc>.*)\) => (?P<path>.+)$")
_COUNT = re.compile(r"^(\d+) libs found in cache")
_HWCAP_DESC = re.compile(r', hwcap: "[^"]*"')


def _ldconfig_listing(args: Sequence[str]) -> List[Tuple[str, str, str]]:
    """(name, description, path) per entry, in the order ldconfig prints them."""
    out = subprocess.run([LDCONFIG, *args], check=True, capture_output=True, text=True).stdout
    lines = out.splitlines()
    m = _COUNT.match(lines[0])
    assert m, f"unexpected ldconfig -p header: {lines[0]!r}"
    rows = [(x["name"], x["desc"], x["path"]) for x in map(_LINE.match, lines[1:]) if x]
    assert len(rows) == int(m.group(1)), "could not parse every ldconfig -p line"
    return rows


def _rows(entries: Sequence[LdCacheEntry]) -> List[Tuple[str, str, str]]:
    return [(e.name, e.describe(), e.path) for e in entries]


def _build_so(root: Path, libdir: str, soname: str, filename: str, m32: bool = False) -> None:
    d = root / libdir.lstrip("/")
    d.mkdir(parents=True, exist_ok=True)
    src = root.parent / "lib.c"
    src.write_text("int gpuslice_fake(void) { return 42; }\n")
    cmd = ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(d / filename), str(src)]
    if m32:
        # No 32-bit libgcc/libc here; a 32-bit object needs neither.
        cmd[1:1] = ["-m32", "-nostdlib"]
    subprocess.run(cmd, check=True)


@pytest.fixture(scope="module")
def ldroot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A driver-like root: NVIDIA and other libraries in three library directories."""
    root = tmp_path_factory.mktemp("ldcache") / "root"
    drv = "580.95.05"
    for soname in ("libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1"):
        _build_so(root, MULTIARCH, soname, soname[:-1] + drv)
    _build_so(root, MULTIARCH, "libfakez.so.1", "libfakez.so.1.2.13")  # not NVIDIA
    _build_so(root, HWCAPS_DIR, "libfakez.so.1", "libfakez.so.1.2.13")  # CPU-specific build
    _build_so(root, NVIDIA_DIR, "libnvidia-encode.so.1", "libnvidia-encode.so." + drv)
    # The same soname in two directories: ldconfig keeps both, ld.so takes the first.
    _build_so(root, NVIDIA_DIR, "libdup.so.1", "libdup.so.1.0")
    _build_so(root, MULTIARCH, "libdup.so.1", "libdup.so.1.0")
    _build_so(root, LIB32_DIR, "libcuda.so.1", "libcuda.so." + drv, m32=True)
    (root / "etc").mkdir()
    (root / "etc/ld.so.conf").write_text(f"{NVIDIA_DIR}\n{LIB32_DIR}\n{MULTIARCH}\n")
    return root


@pytest.fixture(scope="module")
def caches(ldroot: Path) -> Dict[str, Tuple[Path, List[Tuple[str, str, str]]]]:
    """Per format: a copy of the cache ldconfig wrote, and its ldconfig -p listing."""
    out = {}
    for fmt in FORMATS:
        subprocess.run([LDCONFIG, "-r", str(ldroot), "-c", fmt], check=True)
        # With -r, -p reads the root's /etc/ld.so.cache, not the host's.
        listing = _ldconfig_listing(["-r", str(ldroot), "-p"])
        copy = ldroot.parent / f"ld.so.cache.{fmt}"
        shutil.copyfile(ldroot / "etc/ld.so.cache", copy)
        assert _ldconfig_listing(["-p", "-C", str(copy)]) == listing
        out[fmt] = (copy, listing)
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_reader_matches_ldconfig(caches, fmt: str) -> None:
    path, listing = caches[fmt]
    head = path.read_bytes()[:20]
    assert head.startswith(b"glibc-ld.so.cache1.1" if fmt == "new" else b"ld.so-1.7.0")
    assert any(n == "libcuda.so.1" for n, _, _ in listing), "fixture root was not cached"
    entries = read_ld_cache(path)
    if fmt == "compat":
        # ldconfig -p resolves hwcaps names against the file start rather than
        # the string base, printing garbage for compat files; compare the rest.
        assert _rows(entries) != [] and [
            (n, _HWCAP_DESC.sub("", d), p) for n, d, p in _rows(entries)
        ] == [(n, _HWCAP_DESC.sub("", d), p) for n, d, p in listing]
    else:
        assert _rows(entries) == listing


def test_hwcaps_subdirectory_names(caches) -> None:
    by_format = {fmt: read_ld_cache(caches[fmt][0]) for fmt in FORMATS}
    for fmt in ("new", "compat"):
        variants = [e for e in by_format[fmt] if e.hwcaps_subdir is not None]
        assert [(e.name, e.hwcaps_subdir) for e in variants] == [("libfakez.so.1", "x86-64-v3")]
        assert variants[0].uses_hwcap_extension and variants[0].path.startswith(HWCAPS_DIR + "/")
    # The old format has no hwcap word at all.
    assert all(e.hwcap == 0 and e.hwcaps_subdir is None for e in by_format["old"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_native_libraries_of_driver_root(caches, fmt: str) -> None:
    path, listing = caches[fmt]
    dup_paths = [p for n, _, p in listing if n == "libdup.so.1"]
    assert len(dup_paths) == 2 and dup_paths[0] != dup_paths[1]
    expected = {
        "libcuda.so.1": f"{MULTIARCH}/libcuda.so.1",
        "libnvidia-ml.so.1": f"{MULTIARCH}/libnvidia-ml.so.1",
        "libnvidia-ptxjitcompiler.so.1": f"{MULTIARCH}/libnvidia-ptxjitcompiler.so.1",
        "libnvidia-encode.so.1": f"{NVIDIA_DIR}/libnvidia-encode.so.1",
        "libdup.so.1": dup_paths[0],  # first listed wins
        # The old format cannot tell the hwcaps build apart, so its first entry wins.
        "libfakez.so.1": f"{HWCAPS_DIR}/libfakez.so.1.2.13" if fmt == "old" else f"{MULTIARCH}/libfakez.so.1",
    }
    assert native_libraries(read_ld_cache(path), flags={X86_64}) == expected


def test_real_32bit_entry_is_not_native(caches) -> None:
    entries = read_ld_cache(caches["new"][0])
    lib32 = [e for e in entries if e.path == f"{LIB32_DIR}/libcuda.so.1"]
    assert len(lib32) == 1 and lib32[0].flags == FLAG_ELF and lib32[0].describe() == "ELF"
    lib64 = [e for e in entries if e.path == f"{MULTIARCH}/libcuda.so.1"]
    assert len(lib64) == 1 and lib64[0].flags == X86_64
    assert lib64[0].is_native and not lib32[0].is_native  # this suite runs on x86_64 hosts
    assert native_libraries(entries, flags={X86_64})["libcuda.so.1"] == f"{MULTIARCH}/libcuda.so.1"
    assert native_libraries(entries, flags={FLAG_ELF})["libcuda.so.1"] == f"{LIB32_DIR}/libcuda.so.1"


# A minimal cache writer, checked against ldconfig -p below, for files that
# ldconfig will not produce on this host.
Entry = Tuple[int, str, str, int, int]  # flags, name, path, osversion, hwcap


def build_cache(
    entries: Sequence[Entry],
    fmt: str = "new",
    order: str = "<",
    endian_flag: int = -1,
    hwcaps_names: Sequence[str] = (),
) -> bytes:
    strings = bytearray()
    offsets: Dict[str, int] = {}

    def intern(text: str) -> int:
        if text not in offsets:
            offsets[text] = len(strings)
            strings.extend(os.fsencode(text) + b"\0")
        return offsets[text]

    for _, name, path, _, _ in entries:
        intern(name)
        intern(path)
    for h in hwcaps_names:
        intern(h)
    n = len(entries)
    new_size = 0 if fmt == "old" else 48 + 24 * n
    old_n = n if fmt == "old" else (n + 1) & ~1  # compat pads to keep the new block 8-aligned
    old_size = 0 if fmt == "new" else 16 + 12 * old_n
    # Offsets count from the new header (new, compat) or the end of the old entries (old),
    # which in compat is the same place.
    shift = new_size

    out = bytearray()
    if fmt != "new":
        out += b"ld.so-1.7.0\0" + struct.pack(order + "I", old_n)
        old = [(f, shift + offsets[k], shift + offsets[v]) for f, k, v, _, _ in entries]
        old += old[-1:] * (old_n - n)
        for f, k, v in old:
            out += struct.pack(order + "iII", f, k, v)
    ext_off = 0
    if fmt != "old":
        if hwcaps_names:
            ext_off = (old_size + new_size + len(strings) + 3) & ~3
        flag = (2 if order == "<" else 3) if endian_flag < 0 else endian_flag
        out += b"glibc-ld.so.cache1.1" + struct.pack(
            order + "IIB3xI12x", n, len(strings), flag, ext_off
        )
        for f, k, v, osv, hw in entries:
            out += struct.pack(order + "iIIIQ", f, shift + offsets[k], shift + offsets[v], osv, hw)
    out += strings
    if ext_off:
        out += b"\0" * (ext_off - len(out))
        arr = [shift + offsets[h] for h in hwcaps_names]
        out += struct.pack(order + "II", 0xEAA42174, 1)
        out += struct.pack(order + "IIII", 1, 0, ext_off + 24, 4 * len(arr))
        out += struct.pack(f"{order}{len(arr)}I", *arr)
    return bytes(out)


SAMPLE: List[Entry] = [
    (X86_64, "libfoo.so.1", "/opt/a/glibc-hwcaps/x86-64-v3/libfoo.so.1", 0, HWCAP_EXTENSION | 0),
    (X86_64, "libfoo.so.1", "/opt/a/libfoo.so.1", 0, 0),
    (FLAG_ELF_LIBC6, "libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so.1", 0, 0),
    (X86_64, "libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x00030200, 0),
    (X86_64, "libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1", 0, 0),
    (FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64, "libnvidia-ml.so.1", "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1", 0, 0),
    (X86_64, "libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", 0, 0),
]


def _strip_old(entries: Sequence[Entry]) -> List[Tuple[int, str, str]]:
    return [(f, k, v) for f, k, v, _, _ in entries]


@pytest.mark.parametrize("fmt", FORMATS)
def test_built_cache_agrees_with_ldconfig(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"built.{fmt}"
    path.write_bytes(build_cache(SAMPLE, fmt, hwcaps_names=["x86-64-v3"]))
    listing = _ldconfig_listing(["-p", "-C", str(path)])
    entries = read_ld_cache(path)
    if fmt == "compat":  # see test_reader_matches_ldconfig
        listing = [(n, _HWCAP_DESC.sub("", d), p) for n, d, p in listing]
        assert [(n, _HWCAP_DESC.sub("", d), p) for n, d, p in _rows(entries)] == listing
    else:
        assert _rows(entries) == listing
    assert [(e.flags, e.name, e.path) for e in entries] == _strip_old(SAMPLE)
    assert entries[3].osversion == (0 if fmt == "old" else 0x00030200)


@pytest.mark.parametrize("fmt", FORMATS)
def test_big_endian_reads_like_little_endian(fmt: str) -> None:
    little = parse_ld_cache(build_cache(SAMPLE, fmt, "<", hwcaps_names=["x86-64-v3"]))
    big = parse_ld_cache(build_cache(SAMPLE, fmt, ">", hwcaps_names=["x86-64-v3"]))
    assert big == little and len(big) == len(SAMPLE)
    if fmt != "old":
        assert big[0].hwcaps_subdir == "x86-64-v3" and big[3].osversion == 0x00030200


@pytest.mark.parametrize("order", ["<", ">"])
def test_unmarked_byte_order_is_detected_from_the_count(order: str) -> None:
    # Caches from ldconfig before glibc 2.33 leave the endianness bits at 0.
    data = build_cache(SAMPLE, "new", order, endian_flag=0)
    assert [(e.flags, e.name, e.path) for e in parse_ld_cache(data)] == _strip_old(SAMPLE)


def test_native_libraries_first_entry_wins_and_skips_foreign_abis() -> None:
    entries = parse_ld_cache(build_cache(SAMPLE, hwcaps_names=["x86-64-v3"]))
    assert native_libraries(entries, flags={X86_64}) == {
        "libfoo.so.1": "/opt/a/libfoo.so.1",  # baseline preferred over the hwcaps build
        "libcuda.so.1": "/usr/lib/x86_64-linux-gnu/libcuda.so.1",  # i386 entry skipped, then first wins
        "libnvidia-ml.so.1": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",  # aarch64 skipped
    }
    assert native_libraries(entries, flags={FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64}) == {
        "libnvidia-ml.so.1": "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1"
    }
    assert native_libraries(entries, flags={FLAG_ELF_LIBC6}) == {
        "libcuda.so.1": "/usr/lib/i386-linux-gnu/libcuda.so.1"
    }
    # A soname that only has a CPU-specific build still resolves.
    only_variant = [e for e in entries if e.hwcaps_subdir is not None]
    assert native_libraries(only_variant, flags={X86_64}) == {
        "libfoo.so.1": "/opt/a/glibc-hwcaps/x86-64-v3/libfoo.so.1"
    }


def test_native_flags_per_machine() -> None:
    assert native_flags("x86_64", 64) == {0x0303}
    assert native_flags("x86_64", 32) == {FLAG_ELF, FLAG_ELF_LIBC6}
    assert native_flags("aarch64", 64) == {0x0A03}
    assert native_flags("ppc64le", 64) == {0x0503}
    assert native_flags("mystery", 64) == {FLAG_ELF, FLAG_ELF_LIBC6}
    entry = LdCacheEntry("libx.so.1", "/l/libx.so.1", next(iter(NATIVE_FLAGS)))
    assert entry.is_native and not LdCacheEntry("libx.so.1", "/l", -1).is_native


def test_host_cache_agrees_with_ldconfig() -> None:
    entries = read_ld_cache("/etc/ld.so.cache")
    assert _rows(entries) == _ldconfig_listing(["-p"])
    # The host's own libc must count as native, or NATIVE_FLAGS is wrong here.
    assert any(e.name == "libc.so.6" and e.is_native for e in entries)
    assert native_libraries(entries)["libc.so.6"].endswith("/libc.so.6")


# Corrupt input: one-line LdCacheError naming the file.


def _error_for(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "broken-ld.so.cache"
    path.write_bytes(data)
    with pytest.raises(LdCacheError) as info:
        read_ld_cache(path)
    msg = str(info.value)
    assert str(path) in msg and "\n" not in msg
    return msg


def test_empty_file(tmp_path: Path) -> None:
    assert "is not an ld.so.cache" in _error_for(tmp_path, b"")


def test_wrong_magic(tmp_path: Path) -> None:
    msg = _error_for(tmp_path, b"\x7fELF\x02\x01\x01" + b"\0" * 100)
    assert "is not an ld.so.cache (magic b'\\x7fELF" in msg


def test_unsupported_new_version(tmp_path: Path) -> None:
    data = bytearray(build_cache(SAMPLE))
    data[17:20] = b"2.0"
    assert "unsupported ld.so.cache version b'2.0'" in _error_for(tmp_path, bytes(data))


def test_cache_marked_invalid(tmp_path: Path) -> None:
    assert "invalid" in _error_for(tmp_path, build_cache(SAMPLE, endian_flag=1))


@pytest.mark.parametrize("fmt,cut", [("new", 30), ("new", 47), ("old", 13), ("compat", 40)])
def test_truncated_header(tmp_path: Path, fmt: str, cut: int) -> None:
    msg = _error_for(tmp_path, build_cache(SAMPLE, fmt)[:cut])
    assert "truncated at offset" in msg and "header" in msg


@pytest.mark.parametrize("fmt", ["new", "old"])
@pytest.mark.parametrize("endian_flag", [-1, 0])
def test_entry_count_larger_than_file(tmp_path: Path, fmt: str, endian_flag: int) -> None:
    data = bytearray(build_cache(SAMPLE, fmt, endian_flag=endian_flag))
    count_at = 20 if fmt == "new" else 12
    data[count_at:count_at + 4] = struct.pack("<I", 1000)
    assert "truncated at offset" in _error_for(tmp_path, bytes(data))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("field", ["key", "value"])
def test_string_offset_out_of_range(tmp_path: Path, fmt: str, field: str) -> None:
    data = bytearray(build_cache(SAMPLE, fmt))
    # Second entry; in compat the new block (which is read) starts after 16 + 12 * 8 bytes.
    if fmt == "old":
        at = 16 + 12 + (4 if field == "key" else 8)
    else:
        base = 0 if fmt == "new" else 16 + 12 * 8
        at = base + 48 + 24 + (4 if field == "key" else 8)
    data[at:at + 4] = struct.pack("<I", 0x7FFF0000)
    assert f"string offset {0x7FFF0000} out of range" in _error_for(tmp_path, bytes(data))


def test_unterminated_string(tmp_path: Path) -> None:
    data = build_cache(SAMPLE, "old")
    assert "unterminated string" in _error_for(tmp_path, data[:-1] + b"x")


def test_bad_extension_directory(tmp_path: Path) -> None:
    data = bytearray(build_cache(SAMPLE, hwcaps_names=["x86-64-v3"]))
    (ext_off,) = struct.unpack_from("<I", data, 32)
    data[ext_off:ext_off + 4] = b"XXXX"
    assert "extension directory magic" in _error_for(tmp_path, bytes(data))
    struct.pack_into("<I", data, 32, ext_off + 2)
    assert "not 4-byte aligned" in _error_for(tmp_path, bytes(data))


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_truncation_of_a_real_cache_fails_cleanly(caches, fmt: str) -> None:
    data = caches[fmt][0].read_bytes()
    full = parse_ld_cache(data)
    for cut in range(len(data)):
        try:
            got = parse_ld_cache(data[:cut], "cut")
        except LdCacheError as e:
            assert str(e).startswith("cut")
            continue
        # The old format has no length field: a cut inside unused trailing
        # strings can still read, but must then read the same.
        assert fmt == "old" and got == full, f"prefix of {cut} bytes read as {got!r}"


def test_random_corruption_never_escapes_as_another_exception(caches) -> None:
    rng = random.Random(20240611)
    samples = [caches[f][0].read_bytes() for f in FORMATS]
    samples += [build_cache(SAMPLE, f, o, hwcaps_names=["x86-64-v3"]) for f in FORMATS for o in "<>"]
    for data in samples:
        for _ in range(400):
            buf = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
            try:
                parse_ld_cache(bytes(buf))
            except LdCacheError:
                pass


def test_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_ld_cache(tmp_path / "nope")
