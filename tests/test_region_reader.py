"""ocihook.region reads the layout of native/shim's region.h and refuses others."""
import pytest

from ocihook import cheader, region


def write_region(path, magic=None, version=None, size=None, truncate=0):
    ffi = cheader.ffi()
    lib = ffi.dlopen(None)
    r = ffi.new("struct gpuslice_region *")
    r.magic = lib.GPUSLICE_REGION_MAGIC if magic is None else magic
    r.version = lib.GPUSLICE_REGION_VERSION if version is None else version
    r.size = ffi.sizeof("struct gpuslice_region") if size is None else size
    r.device_count = 2
    r.devices[0].uuid = b"GPU-aaaa"
    r.devices[0].limit_bytes = 4 << 30
    r.devices[0].used_bytes = 768 << 20
    r.devices[1].uuid = b"GPU-bbbb"
    r.procs[5].pid = 42
    r.procs[5].state = lib.GPUSLICE_SLOT_LIVE
    r.procs[5].used[0][lib.GPUSLICE_KIND_ALLOC] = 256 << 20
    r.procs[5].used[0][lib.GPUSLICE_KIND_CONTEXT] = 512 << 20
    r.procs[6].pid = 43  # a freed slot: not listed
    data = bytes(ffi.buffer(r))
    path.write_bytes(data[:len(data) - truncate] if truncate else data)


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


def test_missing_file(tmp_path):
    with pytest.raises(region.RegionError, match="cannot open"):
        region.read(str(tmp_path / "nope"))
