"""Opening and reading a file that may not be what its name promises.

Whoever wrote the path may have put a FIFO there (a plain open would wait for
a writer for ever), a link to a device (/dev/zero never ends) or a file far
larger than any the reader means to hold. So: open with O_NONBLOCK (a FIFO
opens at once), check with fstat on that descriptor that it is a regular file
(the file checked is the file read: nothing can be swapped in between), and
read at most a bound. Paths a tenant can write are opened with O_NOFOLLOW as
well (``follow_links=False``).
"""
from __future__ import annotations

import errno
import os
import stat
from typing import Tuple

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"),
)


class NotRegular(ValueError):
    """The path is no regular file (or is a link where none is followed);
    the message names the path and what it is."""


class TooLarge(ValueError):
    """The file holds more than the reader's bound; the message names both."""


class NotText(ValueError):
    """Bytes that are not UTF-8; the message names the first bad one and where."""


def kind_of(mode: int) -> str:
    """What a file of this st_mode is, in words: 'a FIFO', 'a folder', ..."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a file"


def open_regular(path: str, follow_links: bool = True) -> Tuple[int, os.stat_result]:
    """An O_RDONLY descriptor of the regular file at path, and its fstat.

    Raises NotRegular for anything else, and for a symbolic link when
    follow_links is false; OSError (FileNotFoundError, ...) when it cannot be
    opened at all. The caller closes the descriptor.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow_links:
            raise NotRegular(f"{path}: is a symbolic link, which is not followed here") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegular(f"{path}: is {kind_of(st.st_mode)}, not a regular file")
    return fd, st


def read_at_most(fd: int, limit: int) -> bytes:
    """Up to limit + 1 bytes from fd's current offset: more than limit means
    the file is larger than the bound, whatever its size said a moment ago."""
    chunks = []
    left = limit + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_bounded(path: str, limit: int, follow_links: bool = True) -> bytes:
    """The whole of the regular file at path, which may hold at most limit bytes.

    Raises NotRegular, TooLarge, or OSError as open_regular does.
    """
    fd, _ = open_regular(path, follow_links)
    try:
        data = read_at_most(fd, limit)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise TooLarge(f"{path}: is larger than {format_bytes(limit)}, the most read of such "
                       "a file")
    return data


def decode_utf8(data: bytes, path: str) -> str:
    """The text of data; NotText names the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise NotText(f"{path}: byte 0x{data[e.start]:02x} at offset {e.start} is not "
                         "UTF-8; save the file as UTF-8 text") from None


def format_bytes(n: int) -> str:
    """1048576 -> '1 MiB', 4096 -> '4 KiB', 100 -> '100 bytes'."""
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"
