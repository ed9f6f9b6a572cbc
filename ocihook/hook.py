"""gpuslice-hook: the OCI hook that admits a container to a card, and releases it.

    gpuslice-hook create --device NAME   (createContainer; one run per device)
    gpuslice-hook release                (poststop)

The runtime writes the container's OCI state on stdin; the bundle's
config.json is read from the folder the state names. Both are written by
whoever built the container, so everything is checked: the id, the paths,
the sizes, the JSON. A bad input exits 2 with one line and changes nothing;
a refusal (the card is full) exits 1 with one line naming the card, what is
free, what was asked and what to do.

This runs on every container start: it imports only what it needs (no click,
no jsonschema). bench/ measures it.
"""
from __future__ import annotations

import json
import os
import re
import stat
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, NoReturn, Optional, Sequence

from ocihook.messages import EXIT_ERROR, EXIT_NO

STATE_MAX_BYTES = 64 * 1024          # an OCI state is a few hundred bytes
CONFIG_MAX_BYTES = 16 * 1024 * 1024  # config.json; real ones are tens of KiB
# Podman, Docker and containerd use 64 hex digits; CRI-O and others names of
# this alphabet. Never a slash, never a leading dot.
CONTAINER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class HookError(Exception):
    """Bad input: exit 2 with this one line."""


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    print(f"gpuslice-hook: {'error: ' if code == EXIT_ERROR else ''}{message}", file=sys.stderr)
    sys.exit(code)


@dataclass(frozen=True)
class State:
    id: str
    pid: Optional[int]
    bundle: str


def check_container_id(cid: Any) -> str:
    """cid if it may name a folder and a database row; HookError otherwise."""
    if not isinstance(cid, str) or not CONTAINER_ID.match(cid) or ".." in cid:
        raise HookError(f"container id {cid!r} is not 1-128 letters, digits, '_', '.', '-' "
                        "starting with a letter or digit")
    return cid


def read_state(stream: Any) -> State:
    """The OCI state on stdin, checked."""
    data = stream.read(STATE_MAX_BYTES + 1)
    if len(data) > STATE_MAX_BYTES:
        raise HookError(f"the OCI state on stdin is over {STATE_MAX_BYTES} bytes")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise HookError(f"the OCI state on stdin is not JSON ({e}); is this run by an OCI "
                        "runtime?") from None
    if not isinstance(doc, dict):
        raise HookError("the OCI state on stdin is not a JSON object")
    cid = check_container_id(doc.get("id"))
    pid = doc.get("pid")
    if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0):
        raise HookError(f"pid {pid!r} in the OCI state is not a positive integer")
    bundle = doc.get("bundle")
    if not isinstance(bundle, str) or not bundle.startswith("/") or "\0" in bundle:
        raise HookError(f"bundle {bundle!r} in the OCI state is not an absolute path")
    return State(cid, pid, bundle)


def read_config(bundle: str) -> Dict[str, Any]:
    """The bundle's config.json: the bundle a real folder, the file a regular file, bounded."""
    try:
        st = os.lstat(bundle)
    except OSError as e:
        raise HookError(f"bundle {bundle}: {e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise HookError(f"bundle {bundle} is not a folder")
    try:
        dirfd = os.open(bundle, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise HookError(f"bundle {bundle}: {e.strerror}") from None
    try:
        try:
            fd = os.open("config.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         dir_fd=dirfd)
        except OSError as e:
            raise HookError(f"{bundle}/config.json: {e.strerror} (a link is refused)") from None
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise HookError(f"{bundle}/config.json is not a regular file")
            data = f.read(CONFIG_MAX_BYTES + 1)
    finally:
        os.close(dirfd)
    if len(data) > CONFIG_MAX_BYTES:
        raise HookError(f"{bundle}/config.json is over {CONFIG_MAX_BYTES // (1024 * 1024)} MiB")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise HookError(f"{bundle}/config.json is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise HookError(f"{bundle}/config.json is not a JSON object")
    return doc


def container_user(config: Dict[str, Any]) -> tuple:
    """(uid, gid) of the container's process, for the state dir's owner."""
    user = (config.get("process") or {}).get("user") or {}
    uid, gid = user.get("uid", 0), user.get("gid", 0)
    for what, v in (("uid", uid), ("gid", gid)):
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2 ** 32 - 1:
            raise HookError(f"process.user.{what} {v!r} in config.json is not a valid id")
    return uid, gid


def request_for(device: str, cid: str, cfg: Any, cards: Sequence[Any], pid: Optional[int],
                pid_start: Optional[int], runtime: str = "") -> Any:
    """The accountant's request for one of our CDI device names."""
    from ocihook import accountant

    def whole(uuids: List[str]) -> Any:
        return accountant.Request(cid, device, 0, exclusive=True, card_uuids=uuids, pid=pid,
                                  pid_start=pid_start, runtime=runtime)

    by_index = {c.index: c for c in cards}
    if device == "all":
        return [whole([c.uuid]) for c in cards]
    if device.isdigit():
        if int(device) not in by_index:
            raise HookError(f"device {device}: no card {device} on this host")
        return whole([by_index[int(device)].uuid])
    if device.startswith("GPU-"):
        if device not in {c.uuid for c in cards}:
            raise HookError(f"device {device}: no card with this UUID on this host")
        return whole([device])
    head, sep, rest = device.partition("-")
    card_uuids: Optional[List[str]] = None
    name = device
    if sep and head.isdigit():
        if int(head) not in by_index:
            raise HookError(f"device {device}: no card {head} on this host")
        card_uuids, name = [by_index[int(head)].uuid], rest
    profile = next((p for p in cfg.profiles if p.name == name), None)
    if profile is None:
        known = ", ".join(p.name for p in cfg.profiles)
        raise HookError(f"device {device}: no profile {name!r} in {cfg.source or 'the defaults'} "
                        f"(profiles: {known})")
    return accountant.Request(cid, device, profile.memory_mib, cores=profile.cores or 0,
                              card_uuids=card_uuids, pid=pid, pid_start=pid_start,
                              runtime=runtime)


def container_dir(cfg: Any, cid: str) -> str:
    return os.path.join(cfg.state_dir, "containers", cid)


def make_container_dir(path: str, uid: int, gid: int) -> None:
    """<state_dir>/containers/<id>/, owned by the container's user; no link followed."""
    parent = os.path.dirname(path)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    if os.path.islink(parent) or not os.path.isdir(parent):
        raise HookError(f"{parent} is not a folder")
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        if os.path.islink(path) or not os.path.isdir(path):
            raise HookError(f"{path} exists and is not a folder") from None
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.geteuid() == 0:
            os.fchown(fd, uid, gid)
        os.fchmod(fd, 0o755)
    finally:
        os.close(fd)


def rootfs_of(bundle: str, config: Dict[str, Any]) -> str:
    root = (config.get("root") or {}).get("path")
    if not isinstance(root, str) or not root or "\0" in root:
        raise HookError(f"root.path {root!r} in {bundle}/config.json is not a path")
    return root if root.startswith("/") else os.path.join(bundle, root)


def _open_inside(root_fd: int, rel: str, create: bool) -> int:
    """An O_PATH fd of rel under root_fd, walked one component at a time:
    never through a link, never out of the root (the rootfs is the container
    author's). Missing folders are made when create is set."""
    fd = os.dup(root_fd)
    try:
        for part in [p for p in rel.split("/") if p]:
            if part == "..":
                raise HookError(f"{rel}: '..' is refused")
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                nfd = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=fd)
            except OSError as e:
                raise HookError(f"/{rel} in the container's rootfs: {part} is not a folder "
                                f"({e.strerror}); a link is refused") from None
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def _bind(source_fd: int, target_fd: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    ms_bind, ms_rec = 4096, 16384
    src, dst = f"/proc/self/fd/{source_fd}".encode(), f"/proc/self/fd/{target_fd}".encode()
    if libc.mount(src, dst, None, ms_bind | ms_rec, None) != 0:
        err = ctypes.get_errno()
        raise HookError(f"cannot bind-mount the container's state dir: {os.strerror(err)}")


DIR_PATH_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_in_rootfs(rootfs: str, rel: str) -> int:
    """An O_PATH fd of the folder rel inside the rootfs, made if missing (_open_inside)."""
    try:
        root_fd = os.open(rootfs, DIR_PATH_FLAGS)
    except OSError as e:
        raise HookError(f"rootfs {rootfs}: {e.strerror}") from None
    try:
        return _open_inside(root_fd, rel, create=True)
    finally:
        os.close(root_fd)


def card_dir(cfg: Any) -> str:
    """The host's card files: <state_dir>/cards."""
    return os.path.join(cfg.state_dir, "cards")


def ensure_card_dir(path: str) -> None:
    """The folder every slice mounts read-write: any tenant, whatever its user,
    creates and writes its card's file there (sticky: none removes another's)."""
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o1777)


def mount_state(path: str, cards: str, rootfs: str) -> None:
    """Bind <state_dir>/containers/<id>/ at /run/gpuslice in the container's
    rootfs, with the host's card files at /run/gpuslice/cards in it. Runs in
    the container's mount namespace (createContainer, before pivot_root)."""
    ensure_card_dir(cards)
    inner = os.path.join(path, "cards")
    os.makedirs(inner, exist_ok=True)
    cards_fd, inner_fd = os.open(cards, DIR_PATH_FLAGS), os.open(inner, DIR_PATH_FLAGS)
    try:
        _bind(cards_fd, inner_fd)
    finally:
        os.close(cards_fd)
        os.close(inner_fd)
    target = _open_in_rootfs(rootfs, "run/gpuslice")
    src = os.open(path, DIR_PATH_FLAGS)
    try:
        _bind(src, target)
    finally:
        os.close(src)
        os.close(target)


SHIM_IN_CONTAINER = "/usr/lib/gpuslice/libgpuslice.so"
PRELOAD_MAX_BYTES = 64 * 1024


def add_to_ld_so_preload(rootfs: str) -> None:
    """The shim as a line of the rootfs's /etc/ld.so.preload, the lines already
    there kept. /etc and the file are opened without following a link: in the
    container's mount namespace before pivot_root, a link would lead to the
    host's files."""
    etc_path = _open_in_rootfs(rootfs, "etc")
    # O_PATH cannot be used for *at writes: reopen /etc as a real directory.
    etc = os.open(f"/proc/self/fd/{etc_path}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    os.close(etc_path)
    try:
        try:
            fd = os.open("ld.so.preload", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC |
                         os.O_NONBLOCK, dir_fd=etc)
        except FileNotFoundError:
            lines: List[str] = []
        except OSError as e:
            raise HookError(f"/etc/ld.so.preload in the container's rootfs: {e.strerror} "
                            "(a link is refused)") from None
        else:
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    raise HookError("/etc/ld.so.preload in the container's rootfs is not a "
                                    "regular file")
                data = f.read(PRELOAD_MAX_BYTES + 1)
            if len(data) > PRELOAD_MAX_BYTES:
                raise HookError(f"/etc/ld.so.preload in the container's rootfs is over "
                                f"{PRELOAD_MAX_BYTES} bytes")
            lines = data.decode("utf-8", "replace").splitlines()
        if SHIM_IN_CONTAINER in (x.strip() for x in lines):
            return
        tmp = ".ld.so.preload.gpuslice"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644, dir_fd=etc)
        with os.fdopen(fd, "w") as f:
            f.write("".join(f"{x}\n" for x in lines + [SHIM_IN_CONTAINER]))
        os.rename(tmp, "ld.so.preload", src_dir_fd=etc, dst_dir_fd=etc)
    finally:
        os.close(etc)


def write_placement(path: str, reservation: Any, index: int) -> None:
    """The card the accountant picked for a card-less device: a line of `card`
    in the container's state dir. The shim shows CUDA only the cards listed
    there (a card-less device exposes every card's node)."""
    line = f"{index} {reservation.card_uuid}\n"
    try:
        with open(os.path.join(path, "card"), encoding="ascii") as f:
            lines = [x for x in f.readlines() if x != line]
    except FileNotFoundError:
        lines = []
    tmp = os.path.join(path, ".card.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w") as f:
        f.writelines(lines + [line])
    os.replace(tmp, os.path.join(path, "card"))


def cards_for(acct: Any, cfg: Any) -> List[Any]:
    """The accountant's cards; asked of NVML the first time (or when it knows none)."""
    cards = acct.cards()
    if cards:
        return cards
    from cdi import driverfiles, nvml
    from ocihook import accountant

    nvml_path = driverfiles.nvml_library(cfg.driver_root) if cfg.driver_root != "/" else None
    try:
        inv = nvml.discover(nvml_path)
    except nvml.DiscoveryError as e:
        raise HookError(str(e)) from None
    acct.sync_cards([accountant.Card(g.index, g.uuid, g.memory_mib, g.name, g.mig)
                     for g in inv.gpus])
    return acct.cards()


def open_accountant(cfg: Any) -> Any:
    from ocihook import accountant

    try:
        return accountant.Accountant(cfg.database, cfg.memory_overcommit, cfg.placement)
    except accountant.AccountantError as e:
        raise HookError(str(e)) from None


def _stat_fields(pid: int) -> List[str]:
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    return data[data.rfind(b")") + 2:].decode().split()  # from field 3 on


def _ns_pids(pid: int) -> List[int]:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("NSpid:"):
                return [int(x) for x in line.split()[1:]]
    return [pid]


def host_pid(state_pid: Optional[int]) -> Optional[int]:
    """The container's process as the host sees it.

    runc runs createContainer hooks from the container's init, inside its pid
    namespace, and passes the pid as seen there (1). /proc here is still the
    host's (before pivot_root): the hook's parent is the init, and its NSpid
    line ends with the namespaced pid the state gave. Otherwise the state's
    pid is taken as it is.
    """
    try:
        me = int(os.readlink("/proc/self"))
        parent = int(_stat_fields(me)[1])  # field 4, ppid
        if state_pid is None or parent == state_pid or _ns_pids(parent)[-1] == state_pid:
            return parent if parent > 1 else state_pid
    except (OSError, ValueError, IndexError):
        pass
    return state_pid


def runtime_of(pid: Optional[int]) -> str:
    """The runtime that runs the container, from its init's name ("runc:[2:INIT]")."""
    if not pid:
        return ""
    try:
        with open(f"/proc/{pid}/comm") as f:
            comm = f.read().strip()
    except OSError:
        return ""
    name = comm.split(":", 1)[0]
    return name if re.fullmatch(r"[A-Za-z0-9_.-]{1,32}", name) else ""


def create(device: str, state: State, cfg: Any) -> int:
    from ocihook import accountant, procs

    config = read_config(state.bundle)
    uid, gid = container_user(config)
    acct = open_accountant(cfg)
    try:
        cards = cards_for(acct, cfg)
        pid = host_pid(state.pid)
        pid_start = procs.start_time(pid) if pid else None
        req = request_for(device, state.id, cfg, cards, pid, pid_start, runtime_of(pid))
        try:
            if isinstance(req, list):  # `all`: every card whole, or none
                acct.admit_all(req)
                req = req[0]
                res = None
            else:
                res = acct.admit(req)
        except accountant.Refused as e:
            fail(f"container {state.id[:12]}: {e}", EXIT_NO)
        path = container_dir(cfg, state.id)
        try:
            make_container_dir(path, uid, gid)
            if res is not None and req.card_uuids is None:
                index = next(c.index for c in cards if c.uuid == res.card_uuid)
                write_placement(path, res, index)
            rootfs = rootfs_of(state.bundle, config)
            mount_state(path, card_dir(cfg), rootfs)
            if cfg.preload == "ld.so.preload" and not req.exclusive:
                add_to_ld_so_preload(rootfs)
        except (OSError, HookError):
            acct.release(state.id, "undo")  # nothing held for a container that cannot start
            remove_container_dir(cfg, state.id)
            raise
    finally:
        acct.close()
    return 0


CONTAINER_FILES = ("card", ".card.tmp", "region")


def remove_container_dir(cfg: Any, cid: str) -> None:
    """Remove what we and the shim put there, never recursively: in a mount
    namespace where `cards` is still bound, a recursive removal would reach
    the host's card files."""
    path = container_dir(cfg, cid)
    if not os.path.isdir(path) or os.path.islink(path):
        return
    for name in CONTAINER_FILES:
        try:
            os.unlink(os.path.join(path, name))
        except OSError:
            pass
    for d in (os.path.join(path, "cards"), path):
        try:
            os.rmdir(d)
        except OSError:
            pass


def release(state: State, cfg: Any) -> int:
    acct = open_accountant(cfg)
    try:
        acct.release(state.id)
    finally:
        acct.close()
    remove_container_dir(cfg, state.id)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: gpuslice-hook create --device NAME | gpuslice-hook release"
    if not args or args[0] not in ("create", "release"):
        fail(usage)
    device = None
    if args[0] == "create":
        if len(args) != 3 or args[1] != "--device" or not args[2]:
            fail(usage)
        device = args[2]
    elif len(args) != 1:
        fail(usage)
    from ocihook import config

    try:
        cfg = config.load()
        state = read_state(sys.stdin.buffer)
        if device is not None:
            return create(device, state, cfg)
        return release(state, cfg)
    except config.ConfigError as e:
        fail(str(e))
    except HookError as e:
        fail(str(e))
    except OSError as e:
        fail(f"{e.filename or ''}: {e.strerror}")


if __name__ == "__main__":
    sys.exit(main())
