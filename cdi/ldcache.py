"""Pure-Python reader of glibc's ``ld.so.cache``.

The CDI spec generator has to find the NVIDIA driver's user-space libraries
(``libcuda.so.1``, ``libnvidia-ml.so.1``, ...) inside a driver root that need
not be ``/`` (for example ``/run/nvidia/driver``). Running ``ldconfig -p``
would show the host's cache, not the driver root's, and costs a subprocess, so
this module reads the cache file itself.

Three layouts exist, all written by ``ldconfig -c FORMAT``:

* ``old``: the libc5-era "ld.so-1.7.0" header, 12-byte entries, and string
  offsets counted from the end of the entry array.
* ``new``: the "glibc-ld.so.cache" + "1.1" header (48 bytes), 24-byte entries
  that also carry an OS version and a hwcap word, string offsets counted from
  the start of that header, and an optional extension directory (which names
  the ``glibc-hwcaps`` subdirectories).
* ``compat``: an old block whose string table starts with an aligned new block;
  the new block is the authoritative one and is read when present.

Every read is bounds-checked: a truncated or corrupt file raises
:class:`LdCacheError` with a one-line message naming the file, never
``IndexError`` or ``struct.error``. Errors opening the file (missing, no
permission) propagate as ``OSError``.
"""
from __future__ import annotations

import os
import platform
import struct
import sys
from typing import Dict, FrozenSet, Iterable, List, NamedTuple, Optional, Tuple, Union

__all__ = [
    "LdCacheEntry",
    "LdCacheError",
    "read_ld_cache",
    "parse_ld_cache",
    "native_libraries",
    "native_flags",
    "NATIVE_FLAGS",
]

# Flag words, as glibc's ldconfig.h defines them. The low byte is the library
# type, the next byte the ABI the library requires.
FLAG_TYPE_MASK = 0x00FF
FLAG_LIBC4 = 0x0000
FLAG_ELF = 0x0001
FLAG_ELF_LIBC5 = 0x0002
FLAG_ELF_LIBC6 = 0x0003
FLAG_REQUIRED_MASK = 0xFF00
FLAG_SPARC_LIB64 = 0x0100
FLAG_IA64_LIB64 = 0x0200
FLAG_X8664_LIB64 = 0x0300
FLAG_S390_LIB64 = 0x0400
FLAG_POWERPC_LIB64 = 0x0500
FLAG_MIPS64_LIBN32 = 0x0600
FLAG_MIPS64_LIBN64 = 0x0700
FLAG_X8664_LIBX32 = 0x0800
FLAG_ARM_LIBHF = 0x0900
FLAG_AARCH64_LIB64 = 0x0A00
FLAG_ARM_LIBSF = 0x0B00
FLAG_MIPS_LIB32_NAN2008 = 0x0C00
FLAG_MIPS64_LIBN32_NAN2008 = 0x0D00
FLAG_MIPS64_LIBN64_NAN2008 = 0x0E00
FLAG_RISCV_FLOAT_ABI_SOFT = 0x0F00
FLAG_RISCV_FLOAT_ABI_DOUBLE = 0x1000
FLAG_LARCH_FLOAT_ABI_SOFT = 0x1100
FLAG_LARCH_FLOAT_ABI_DOUBLE = 0x1200

# hwcap bit 62 marks an entry from a glibc-hwcaps subdirectory: the low 32
# bits then index the extension's subdirectory-name array, and bits 32..41
# hold an ISA level.
HWCAP_EXTENSION = 1 << 62
HWCAP_ISA_LEVEL_MASK = (1 << 10) - 1

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache"
NEW_VERSION = b"1.1"

_OLD_HEADER_SIZE = 16  # 11-byte magic, padded to 12, then uint32 nlibs
_OLD_ENTRY_SIZE = 12  # int32 flags, uint32 key, uint32 value
_NEW_HEADER_SIZE = 48  # magic+version, nlibs, len_strings, flags, ext offset, unused
_NEW_ENTRY_SIZE = 24  # flags, key, value, osversion, uint64 hwcap

# Low two bits of the new header's flags byte: which byte order wrote it.
_ENDIAN_UNSET = 0
_ENDIAN_INVALID = 1
_ENDIAN_LITTLE = 2
_ENDIAN_BIG = 3

_EXTENSION_MAGIC = 0xEAA42174  # glibc's cache_extension_magic as uint32
_EXT_TAG_GLIBC_HWCAPS = 1

_HOST_ORDER = "<" if sys.byteorder == "little" else ">"
_SWAPPED_ORDER = ">" if _HOST_ORDER == "<" else "<"


def native_flags(machine: Optional[str] = None, pointer_bits: Optional[int] = None) -> FrozenSet[int]:
    """Flag words that ld.so accepts on ``machine`` (default: this host).

    Mirrors glibc's per-architecture ``_dl_cache_check_flags``; unknown
    machines get glibc's generic rule (plain ELF or libc6, no ABI bits).
    """
    m = (machine if machine is not None else platform.machine()).lower()
    bits = pointer_bits if pointer_bits is not None else struct.calcsize("P") * 8
    libc6 = FLAG_ELF_LIBC6
    if m in ("x86_64", "amd64"):
        # A 32-bit interpreter on a 64-bit kernel still reports x86_64.
        return frozenset({libc6 | FLAG_X8664_LIB64}) if bits == 64 else frozenset({FLAG_ELF, libc6})
    if m in ("aarch64", "arm64", "aarch64_be"):
        return frozenset({libc6 | FLAG_AARCH64_LIB64}) if bits == 64 else frozenset({libc6 | FLAG_ARM_LIBHF})
    if m in ("ppc64", "ppc64le"):
        return frozenset({libc6 | FLAG_POWERPC_LIB64})
    if m == "s390x":
        return frozenset({libc6 | FLAG_S390_LIB64})
    if m == "riscv64":
        return frozenset({libc6 | FLAG_RISCV_FLOAT_ABI_DOUBLE})
    if m == "loongarch64":
        return frozenset({libc6 | FLAG_LARCH_FLOAT_ABI_DOUBLE})
    if m.startswith("armv") and m.endswith("l"):
        # Debian/Ubuntu 32-bit ARM is hard-float; soft-float hosts are rare.
        return frozenset({libc6 | FLAG_ARM_LIBHF})
    return frozenset({FLAG_ELF, libc6})


#: The flag words this interpreter's host ABI accepts.
NATIVE_FLAGS: FrozenSet[int] = native_flags()

_TYPE_NAMES = {FLAG_LIBC4: "libc4", FLAG_ELF: "ELF", FLAG_ELF_LIBC5: "libc5", FLAG_ELF_LIBC6: "libc6"}
_REQUIRED_NAMES = {
    FLAG_SPARC_LIB64: "64bit",
    FLAG_IA64_LIB64: "IA-64",
    FLAG_X8664_LIB64: "x86-64",
    FLAG_S390_LIB64: "64bit",
    FLAG_POWERPC_LIB64: "64bit",
    FLAG_MIPS64_LIBN32: "N32",
    FLAG_MIPS64_LIBN64: "64bit",
    FLAG_X8664_LIBX32: "x32",
    FLAG_ARM_LIBHF: "hard-float",
    FLAG_AARCH64_LIB64: "AArch64",
    FLAG_ARM_LIBSF: "soft-float",
    FLAG_MIPS_LIB32_NAN2008: "nan2008",
    FLAG_MIPS64_LIBN32_NAN2008: "N32,nan2008",
    FLAG_MIPS64_LIBN64_NAN2008: "64bit,nan2008",
    FLAG_RISCV_FLOAT_ABI_SOFT: "soft-float",
    FLAG_RISCV_FLOAT_ABI_DOUBLE: "double-float",
    FLAG_LARCH_FLOAT_ABI_SOFT: "soft-float",
    FLAG_LARCH_FLOAT_ABI_DOUBLE: "double-float",
}


class LdCacheError(Exception):
    """A file that is not a readable ld.so.cache; the message names the file."""


class LdCacheEntry(NamedTuple):
    """One cache entry: a soname and the path ld.so would open for it."""

    name: str  # the key, e.g. "libcuda.so.1"
    path: str  # as written in the cache; relative to the root ldconfig ran in
    flags: int  # raw flags word (library type | required ABI)
    osversion: int = 0  # minimum kernel from the ELF ABI note; 0 if none (always 0 in old format)
    hwcap: int = 0  # raw hwcap word; 0 in the old format
    hwcaps_subdir: Optional[str] = None  # glibc-hwcaps subdirectory name, e.g. "x86-64-v3"

    @property
    def is_native(self) -> bool:
        """True if this host's ld.so would use the entry (same ABI)."""
        return self.flags in NATIVE_FLAGS

    @property
    def is_hwcap_variant(self) -> bool:
        """True for a CPU-specific build (legacy hwcap or glibc-hwcaps)."""
        return self.hwcap != 0 or self.hwcaps_subdir is not None

    @property
    def uses_hwcap_extension(self) -> bool:
        """True if the hwcap word indexes the glibc-hwcaps name table."""
        return ((self.hwcap >> 32) & ~HWCAP_ISA_LEVEL_MASK) == (HWCAP_EXTENSION >> 32)

    def describe(self) -> str:
        """The parenthesised text ``ldconfig -p`` prints for this entry.

        Matches the glibc 2.36 ldconfig, which does not print the OS version.
        """
        kind = _TYPE_NAMES.get(self.flags & FLAG_TYPE_MASK, "unknown")
        required = self.flags & FLAG_REQUIRED_MASK
        if required:
            kind += "," + _REQUIRED_NAMES.get(required, str(required))
        if self.hwcaps_subdir is not None:
            kind += f', hwcap: "{self.hwcaps_subdir}"'
        elif self.hwcap:
            kind += f", hwcap: 0x{self.hwcap:016x}"
        return kind


class _Reader:
    """Bounds-checked access to the bytes of one cache file."""

    def __init__(self, data: bytes, label: str) -> None:
        self.data = data
        self.size = len(data)
        self.label = label

    def fail(self, what: str) -> LdCacheError:
        return LdCacheError(f"{self.label}: {what}")

    def need(self, offset: int, length: int, what: str) -> None:
        if offset + length > self.size:
            raise self.fail(
                f"truncated at offset {offset}: {what} needs {length} bytes, "
                f"file has {max(self.size - offset, 0)} left"
            )

    def unpack(self, fmt: str, offset: int, what: str) -> Tuple[int, ...]:
        self.need(offset, struct.calcsize(fmt), what)
        return struct.unpack_from(fmt, self.data, offset)

    def string(self, base: int, rel: int, what: str) -> str:
        offset = base + rel
        if offset >= self.size:
            raise self.fail(f"string offset {rel} out of range ({what}; file size {self.size})")
        end = self.data.find(b"\0", offset)
        if end < 0:
            raise self.fail(f"unterminated string at offset {offset} ({what})")
        # Paths are bytes on disk; surrogateescape keeps odd bytes round-trippable.
        return os.fsdecode(self.data[offset:end])


def _fits(count: int, entry_size: int, start: int, size: int) -> bool:
    return start + count * entry_size <= size


def _pick_order(r: _Reader, count_offset: int, entry_size: int, entries_start: int) -> str:
    """Byte order for a header that does not say which it is.

    Host order unless its entry count cannot fit in the file and the swapped
    one can; a count that fits neither way is reported as truncation.
    """
    (host,) = r.unpack(_HOST_ORDER + "I", count_offset, "entry count")
    if _fits(host, entry_size, entries_start, r.size):
        return _HOST_ORDER
    (swapped,) = struct.unpack_from(_SWAPPED_ORDER + "I", r.data, count_offset)
    if _fits(swapped, entry_size, entries_start, r.size):
        return _SWAPPED_ORDER
    raise r.fail(
        f"truncated at offset {entries_start}: header says {host} entries "
        f"({host * entry_size} bytes), file has {r.size - entries_start} left"
    )


def _new_block_at(r: _Reader, offset: int) -> bool:
    end = offset + len(NEW_MAGIC) + len(NEW_VERSION)
    return end <= r.size and r.data[offset:end] == NEW_MAGIC + NEW_VERSION


def _read_hwcaps_names(r: _Reader, order: str, ext_offset: int) -> Optional[List[int]]:
    """String offsets of the glibc-hwcaps subdirectory names, or None.

    Validated as strictly as ``ldconfig -p`` does: a malformed directory makes
    the whole file unreadable, an unusable hwcaps section is just ignored.
    """
    if ext_offset == 0:
        return None
    if ext_offset % 4:
        raise r.fail(f"extension directory offset {ext_offset} is not 4-byte aligned")
    magic, count = r.unpack(order + "II", ext_offset, "extension directory header")
    if magic != _EXTENSION_MAGIC:
        raise r.fail(f"bad extension directory magic 0x{magic:08x} at offset {ext_offset}")
    r.need(ext_offset + 8, count * 16, f"extension directory of {count} sections")
    names: Optional[List[int]] = None
    for i in range(count):
        tag, _flags, sec_off, sec_size = struct.unpack_from(order + "IIII", r.data, ext_offset + 8 + 16 * i)
        r.need(sec_off, sec_size, f"extension section {i} (tag {tag})")
        if tag == _EXT_TAG_GLIBC_HWCAPS and sec_size and sec_off % 4 == 0 and sec_size % 4 == 0:
            names = list(struct.unpack_from(f"{order}{sec_size // 4}I", r.data, sec_off))
    return names


def _parse_new(r: _Reader, base: int) -> List[LdCacheEntry]:
    """Entries of the new-format block whose header starts at ``base``."""
    r.need(base, _NEW_HEADER_SIZE, "new-format header")
    version = r.data[base + len(NEW_MAGIC):base + len(NEW_MAGIC) + len(NEW_VERSION)]
    if version != NEW_VERSION:
        raise r.fail(f"unsupported ld.so.cache version {version!r} (expected {NEW_VERSION!r})")
    endian = r.data[base + 28] & 3
    entries_start = base + _NEW_HEADER_SIZE
    if endian == _ENDIAN_INVALID:
        raise r.fail("ldconfig marked this cache as invalid (endianness flag 1)")
    if endian == _ENDIAN_LITTLE:
        order = "<"
    elif endian == _ENDIAN_BIG:
        order = ">"
    else:  # written by ldconfig older than glibc 2.33: no byte-order mark
        order = _pick_order(r, base + 20, _NEW_ENTRY_SIZE, entries_start)
    nlibs, len_strings = struct.unpack_from(order + "II", r.data, base + 20)
    (ext_offset,) = struct.unpack_from(order + "I", r.data, base + 32)
    r.need(entries_start, nlibs * _NEW_ENTRY_SIZE, f"{nlibs} new-format entries")
    # ldconfig writes the string table right after the entries.
    r.need(entries_start + nlibs * _NEW_ENTRY_SIZE, len_strings, f"string table of {len_strings} bytes")
    hwcaps_names = _read_hwcaps_names(r, order, ext_offset)

    entry_fmt = order + "iIIIQ"
    out: List[LdCacheEntry] = []
    for i in range(nlibs):
        off = entries_start + i * _NEW_ENTRY_SIZE
        flags, key, value, osversion, hwcap = struct.unpack_from(entry_fmt, r.data, off)
        subdir: Optional[str] = None
        if ((hwcap >> 32) & ~HWCAP_ISA_LEVEL_MASK) == (HWCAP_EXTENSION >> 32) and hwcaps_names is not None:
            index = hwcap & 0xFFFFFFFF
            if index < len(hwcaps_names):
                # ldconfig stores these relative to the string base (the new
                # header), like keys and values; its own -p output wrongly
                # uses the file start, which only matters for compat files.
                subdir = r.string(base, hwcaps_names[index], f"hwcaps name of entry {i}")
        out.append(
            LdCacheEntry(
                name=r.string(base, key, f"name of entry {i}"),
                path=r.string(base, value, f"path of entry {i}"),
                flags=flags,
                osversion=osversion,
                hwcap=hwcap,
                hwcaps_subdir=subdir,
            )
        )
    return out


def _parse_old(r: _Reader) -> List[LdCacheEntry]:
    """Entries of an old-format file, or of the new block a compat file hides."""
    r.need(0, _OLD_HEADER_SIZE, "old-format header")
    order = _pick_order(r, 12, _OLD_ENTRY_SIZE, _OLD_HEADER_SIZE)
    (nlibs,) = struct.unpack_from(order + "I", r.data, 12)
    strings = _OLD_HEADER_SIZE + nlibs * _OLD_ENTRY_SIZE

    # A compat file puts a new block at the start of the old string table,
    # aligned for struct cache_file_new: 8 bytes on 64-bit hosts, 4 on i386.
    for align in (8, 4):
        candidate = (strings + align - 1) & ~(align - 1)
        if _new_block_at(r, candidate):
            return _parse_new(r, candidate)

    out: List[LdCacheEntry] = []
    for i in range(nlibs):
        flags, key, value = struct.unpack_from(order + "iII", r.data, _OLD_HEADER_SIZE + i * _OLD_ENTRY_SIZE)
        out.append(
            LdCacheEntry(
                name=r.string(strings, key, f"name of entry {i}"),
                path=r.string(strings, value, f"path of entry {i}"),
                flags=flags,
            )
        )
    return out


def parse_ld_cache(data: bytes, label: str = "<ld.so.cache>") -> List[LdCacheEntry]:
    """Entries of cache bytes ``data`` in cache order; ``label`` names it in errors."""
    r = _Reader(bytes(data), label)
    if r.size == 0:
        raise LdCacheError(f"{label} is not an ld.so.cache (empty file)")
    if r.data.startswith(OLD_MAGIC):
        return _parse_old(r)
    if r.data.startswith(NEW_MAGIC):
        return _parse_new(r, 0)
    head = r.data[: len(NEW_MAGIC)]
    raise LdCacheError(f"{label} is not an ld.so.cache (magic {head!r})")


def read_ld_cache(path: Union[str, "os.PathLike[str]"]) -> List[LdCacheEntry]:
    """Entries of the cache file at ``path``, in cache (= lookup) order."""
    with open(path, "rb") as f:
        data = f.read()
    return parse_ld_cache(data, os.fspath(path))


def native_libraries(
    entries: Iterable[LdCacheEntry], flags: Optional[Iterable[int]] = None
) -> Dict[str, str]:
    """Map soname -> path for entries of the native ABI (or of ``flags``).

    The first entry for a soname wins, as in ld.so's lookup. CPU-specific
    variants (glibc-hwcaps subdirectories, legacy hwcap) come first in the
    cache but may not run on every CPU, so they are used only for sonames
    that have no baseline entry.
    """
    accept = NATIVE_FLAGS if flags is None else frozenset(flags)
    baseline: Dict[str, str] = {}
    variants: Dict[str, str] = {}
    for e in entries:
        if e.flags not in accept:
            continue
        target = variants if e.is_hwcap_variant else baseline
        target.setdefault(e.name, e.path)
    for name, path in variants.items():
        baseline.setdefault(name, path)
    return baseline
