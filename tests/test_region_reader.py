"""ocihook.region reads the layout of native/shim's region.h and refuses others.

A region lies in a folder the container writes, so what stands at its name
may be anything a tenant put there: a FIFO, a link to a device, a file of
another size. Each is refused with a RegionError that names the file and
why, at once (a FIFO never blocks the reader).
"""
import os
import stat
import threading

import pytest

from ocihook import cheader, region

DEFAULT_DEVICES = (("GPU-aaaa", 4 << 30, 768 << 20), ("GPU-bbbb", 0, 0))


DEFAULT_PROCS = ((42, {0: {"alloc": 256 << 20, "context": 512 << 20}}),)


def write_region(path, magic=None, version=None, size=None, truncate=0,
                 devices=DEFAULT_DEVICES, procs=DEFAULT_PROCS):
    """A region as the shim makes it (through region.h's own struct), with
    `devices` as (uuid, limit_bytes, used_bytes[, core_limit, charged_ns,
    throttled_ns]) and `procs` as (pid, {device: {kind: bytes}}) in live
    entries from entry 5 on, then a freed entry."""
    ffi = cheader.ffi()
    lib = ffi.dlopen(None)
    r = ffi.new("struct gpuslice_region *")
    r.magic = lib.GPUSLICE_REGION_MAGIC if magic is None else magic
    r.version = lib.GPUSLICE_REGION_VERSION if version is None else version
    r.size = ffi.sizeof("struct gpuslice_region") if size is None else size
    r.device_count = len(devices)
    for i, (uuid, limit, used, *compute) in enumerate(devices):
        r.devices[i].uuid = uuid.encode()
        r.devices[i].limit_bytes = limit
        r.devices[i].used_bytes = used
        if compute:
            d = r.devices[i]
            d.core_limit, d.compute.charged_ns, d.compute.throttled_ns = compute
    entry = 5
    for entry, (pid, used_by_device) in enumerate(procs, start=5):
        r.procs[entry].pid = pid
        r.procs[entry].state = lib.GPUSLICE_PROC_LIVE
        for dev, kinds in used_by_device.items():
            for kind, n in kinds.items():
                r.procs[entry].used[dev][region.KIND_NAMES.index(kind)] = n
    r.procs[entry + 1].pid = 43  # a freed entry: not listed
    data = bytes(ffi.buffer(r))
    path.write_bytes(data[:len(data) - truncate] if truncate else data)


def region_size():
    return cheader.ffi().sizeof("struct gpuslice_region")


def test_reads_devices_and_live_processes(tmp_path):
    write_region(tmp_path / "region")
    snap = region.read(str(tmp_path / "region"))
    assert [(d.uuid, d.limit_bytes, d.used_bytes) for d in snap.devices] == [
        ("GPU-aaaa", 4 << 30, 768 << 20), ("GPU-bbbb", 0, 0)]
    assert [p.pid for p in snap.procs] == [42]
    assert snap.procs[0].used[0][:2] == [512 << 20, 256 << 20]
    assert region.KIND_NAMES[1] == "alloc"


@pytest.mark.parametrize("kwargs, rule", [
    ({"magic": 0x1234}, "not a gpuslice region"),
    ({"version": 99}, "not a gpuslice region"),
    ({"size": 12}, "not a gpuslice region"),
    ({"truncate": 100}, "a region has"),
])
def test_refuses_what_it_does_not_know(tmp_path, kwargs, rule):
    write_region(tmp_path / "region", **kwargs)
    with pytest.raises(region.RegionError, match=rule):
        region.read(str(tmp_path / "region"))


def test_missing_file_is_no_region_yet(tmp_path):
    with pytest.raises(region.NoRegion, match="cannot open"):
        region.read(str(tmp_path / "nope"))


def test_a_region_not_yet_made_is_no_region(tmp_path):
    """The shim creates the file, sizes it, then fills it in, under its lock:
    a reader in between sees no region, not a broken one."""
    path = tmp_path / "region"
    path.write_bytes(b"")
    with pytest.raises(region.NoRegion, match="empty"):
        region.read(str(path))
    path.write_bytes(b"\0" * region_size())
    with pytest.raises(region.NoRegion, match="not filled in yet"):
        region.read(str(path))


def test_a_larger_file_is_refused(tmp_path):
    """Not only a short one: the shim makes the region at exactly its size."""
    path = tmp_path / "region"
    write_region(path)
    with open(path, "ab") as f:
        f.write(b"\0")
    with pytest.raises(region.RegionError) as e:
        region.read(str(path))
    assert str(e.value) == (f"{path}: {region_size() + 1} bytes, a region has {region_size()}; "
                            "refusing to guess its layout")
    assert not isinstance(e.value, region.NoRegion)


def read_without_hanging(path, read=region.read):
    """read(path) in a thread; if it blocks (a FIFO opened without O_NONBLOCK
    waits for a writer), a writer is opened to let it go and the test fails
    rather than hang."""
    out = {}

    def run():
        try:
            out["result"] = read(str(path))
        except region.RegionError as e:
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(30)
    if t.is_alive():
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(30)
        pytest.fail(f"{read.__name__} blocked on {path}")
    return out


def test_a_fifo_is_refused_at_once(tmp_path):
    path = tmp_path / "region"
    os.mkfifo(path)
    out = read_without_hanging(path)
    assert str(out["error"]) == (f"{path}: is a FIFO, not a regular file; a region is a "
                                 "regular file that libgpuslice.so makes, so this one is not "
                                 "read")


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/null", "real-region"])
def test_a_symbolic_link_is_not_followed(tmp_path, target):
    """Not to a device, nor even to a good region: what a tenant links to is
    none of the host's business to read."""
    if target == "real-region":
        write_region(tmp_path / target)
    path = tmp_path / "region"
    path.symlink_to(target)
    with pytest.raises(region.RegionError, match="is a symbolic link, which is not followed"):
        region.read(str(path))


def test_a_folder_or_a_device_node_is_refused(tmp_path):
    path = tmp_path / "region"
    path.mkdir()
    with pytest.raises(region.RegionError, match="is a folder, not a regular file"):
        region.read(str(path))
    path.rmdir()
    # A tenant with CAP_MKNOD can make a node in place (Docker grants it by
    # default); this one is /dev/null's, whose reads end at once, so that the
    # test shows the refusal whether or not the folder is mounted nodev.
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    with pytest.raises(region.RegionError) as e:
        region.read(str(path))
    assert ("is a character device, not a regular file" in str(e.value)
            or "cannot open: Permission denied" in str(e.value)), e.value


def test_card_files_are_read_the_same_way(tmp_path):
    path = tmp_path / "GPU-aaaa"
    os.mkfifo(path)
    out = read_without_hanging(path, region.read_card)
    assert "is a FIFO, not a regular file; a card file is a regular file" in str(out["error"])
    path.unlink()
    path.write_bytes(b"\1" * 10)
    with pytest.raises(region.RegionError, match="10 bytes, a card file has"):
        region.read_card(str(path))
