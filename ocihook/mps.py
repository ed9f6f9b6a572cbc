"""`gpuslice mps start|stop|status [CARD]`: the NVIDIA MPS control daemon of
each card in MPS mode (configuration card_modes, recorded in the accountant
by `gpuslice cdi generate`), run by gpuslice itself with its folders under
the state dir (statedir.h: mps/<uuid>/pipe, log, shm).

One daemon per card, shown only that card (CUDA_VISIBLE_DEVICES=<uuid>).
It runs in a mount namespace of its own where the card's shm folder is
/dev/shm: the MPS server it starts maps what it shares with its clients
there, and each slice of the card has the same folder mounted at /dev/shm
(cdi/generate.py), so a client in a container reaches its server with no
`--ipc=host` (docs/compute-limit.md, Two modes). gpuslice-hook admits a
slice of the card while the daemon's control pipe is there (mpsdaemon.h);
stop removes what the daemon leaves, so a stopped card is refused at once.
The daemon is found by its environment: a process whose command is
nvidia-cuda-mps-control and whose CUDA_MPS_PIPE_DIRECTORY is the card's
pipe folder.

Functions for the CLI and tests; errors are MpsError, one line.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import List, Optional, Tuple

from cdi.limits import MODE_MPS, MPS_LOG_ENV, MPS_PIPE_ENV
from ocihook import accountant, cards, statedir
from ocihook.config import Config

CONTROL_BINARY = "nvidia-cuda-mps-control"
WAIT_S = 10.0  # for the pipe to appear at a start, the daemon to go at a stop
UP, DOWN, STALE = "up", "down", "stale"  # a daemon's states (status)


class MpsError(ValueError):
    """A card, a binary or a daemon that cannot be used; the message is one line."""


@dataclass(frozen=True)
class Daemon:
    """A card in MPS mode and its daemon's folders on the host."""
    card: accountant.Card
    pipe_dir: str
    log_dir: str
    shm_dir: str
    control: str

    @classmethod
    def of(cls, cfg: Config, card: accountant.Card) -> "Daemon":
        sd, u = cfg.state_dir, card.uuid
        return cls(card, statedir.mps_pipe_dir(sd, u), statedir.mps_log_dir(sd, u),
                   statedir.mps_shm_dir(sd, u), statedir.mps_control(sd, u))

    def name(self) -> str:
        return f"card {self.card.index} ({self.card.uuid})"

    def env(self) -> "dict[str, str]":
        """The daemon's environment: its card alone, its folders."""
        return dict(os.environ, CUDA_VISIBLE_DEVICES=self.card.uuid,
                    **{MPS_PIPE_ENV: self.pipe_dir, MPS_LOG_ENV: self.log_dir})


def daemons(cfg: Config, acct: accountant.Accountant, ref: Optional[str]) -> List[Daemon]:
    """The card ref names (its index or UUID), which must be in MPS mode, or
    every card in MPS mode (none: MpsError)."""
    if ref is not None:
        try:
            card = cards.find(acct, ref)
        except cards.CardError as e:
            raise MpsError(str(e)) from None
        if card.mode != MODE_MPS:
            raise MpsError(f"card {card.index} ({card.uuid}) is in {card.mode} mode, not "
                           f"{MODE_MPS}: set card_modes: {{{card.index}: {MODE_MPS}}} in the "
                           "configuration and run `gpuslice cdi generate`")
        return [Daemon.of(cfg, card)]
    found = [Daemon.of(cfg, c) for c in acct.cards() if c.mode == MODE_MPS]
    if not found:
        raise MpsError("no card is in MPS mode: set card_modes (e.g. card_modes: {0: mps}) "
                       "in the configuration and run `gpuslice cdi generate`")
    return found


def control_binary() -> str:
    """nvidia-cuda-mps-control as PATH finds it."""
    found = shutil.which(CONTROL_BINARY)
    if not found:
        raise MpsError(f"{CONTROL_BINARY} is not installed (not found in PATH): it comes with "
                       "the NVIDIA driver's utilities (nvidia-utils or nvidia-compute-utils); "
                       "install them")
    return found


def _pipe_there(d: Daemon) -> bool:
    try:
        mode = os.lstat(d.control).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _is_control(argv: List[bytes]) -> bool:
    # Its own command, or a script's interpreter with it as the first argument.
    return any(os.path.basename(a) == CONTROL_BINARY.encode() for a in argv[:2])


def _ours(pid: str, own_ns: str) -> bool:
    """pid runs as we do, in our pid namespace: a daemon `gpuslice mps start`
    made. A command line and an environment are a tenant's to choose: a
    container's process named nvidia-cuda-mps-control with the card's pipe
    folder in its env must not pass for the card's daemon."""
    try:
        return (os.stat(f"/proc/{pid}").st_uid == os.geteuid() and
                os.readlink(f"/proc/{pid}/ns/pid") == own_ns)
    except OSError:
        return False


def daemon_pid(d: Daemon) -> Optional[int]:
    """The pid of the control daemon that listens in d's pipe folder, if any."""
    want = f"{MPS_PIPE_ENV}={d.pipe_dir}".encode()
    own_ns = os.readlink("/proc/self/ns/pid")
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or not _ours(entry, own_ns):
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if not _is_control(argv):
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if want in f.read().split(b"\0"):
                    return int(entry)
        except OSError:
            continue  # gone, or not ours to read
    return None


def state(d: Daemon) -> Tuple[str, Optional[int]]:
    """UP (its pipe there and its process alive), STALE (a pipe left by a
    daemon that is gone: the hook would admit, no client could connect) or
    DOWN; and the daemon's pid."""
    pid = daemon_pid(d)
    if _pipe_there(d):
        return (UP if pid else STALE), pid
    return DOWN, pid


def _clear_pipes(d: Daemon) -> None:
    """What a daemon left in its pipe folder: the hook reads the control pipe
    as 'up'."""
    if os.path.isdir(d.pipe_dir):
        for name in os.listdir(d.pipe_dir):
            path = os.path.join(d.pipe_dir, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)


def _log_tail(d: Daemon) -> str:
    try:
        with open(os.path.join(d.log_dir, "control.log"), errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
        return f"; its log's last line: {lines[-1]}" if lines else ""
    except OSError:
        return ""


def make_folders(state_dir: str, uuid: str) -> None:
    """The card's pipe, log and shm folders (`gpuslice cdi generate` makes
    them too: a slice mounts them before its hook runs)."""
    for folder, mode in ((statedir.mps_pipe_dir(state_dir, uuid), 0o755),
                         (statedir.mps_log_dir(state_dir, uuid), 0o755),
                         (statedir.mps_shm_dir(state_dir, uuid), 0o1777)):
        os.makedirs(folder, exist_ok=True)
        os.chmod(folder, mode)  # shm as /dev/shm: a client of any user maps its part


def _outside_dev_shm(state_dir: str, d: Daemon) -> None:
    """The daemon's namespace has the card's shm folder over /dev/shm: a pipe
    or log folder below /dev/shm would be hidden from it, and it exits 1
    saying nothing."""
    shm = os.path.realpath("/dev/shm")
    for folder in (d.pipe_dir, d.log_dir):
        real = os.path.realpath(folder)
        if real == shm or real.startswith(shm + os.sep):
            raise MpsError(f"{d.name()}: state_dir {state_dir} lies under /dev/shm, which "
                           "the MPS daemon's namespace replaces with the card's shm folder; "
                           "set state_dir outside /dev/shm (the default is /run/gpuslice)")


def start(cfg: Config, d: Daemon) -> str:
    """Start d's daemon (a left pipe is cleared first); what to print."""
    now, pid = state(d)
    if now == UP:
        return f"{d.name()}: MPS control daemon running already (pid {pid})"
    binary = control_binary()
    _outside_dev_shm(cfg.state_dir, d)
    if now == STALE:
        _clear_pipes(d)
    make_folders(cfg.state_dir, d.card.uuid)
    # A mount namespace of its own where the card's shm folder is /dev/shm;
    # `-d` leaves the daemon there and returns.
    script = 'mount --bind "$1" /dev/shm && exec "$2" -d'
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
            d.shm_dir, binary]
    # Its stderr to a file, not a pipe: the daemon keeps what it inherits,
    # and a pipe would not end while it runs.
    with tempfile.TemporaryFile("w+") as err:
        try:
            res = subprocess.run(argv, env=d.env(), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=err, timeout=60)
        except OSError as e:
            raise MpsError(f"{d.name()}: cannot run unshare: {e.strerror}; gpuslice mps runs "
                           "as root with util-linux's unshare and mount") from None
        err.seek(0)
        said = (err.read().strip().splitlines() or ["no message"])[-1]
    if res.returncode != 0:
        raise MpsError(f"{d.name()}: {CONTROL_BINARY} -d failed (exit {res.returncode}: "
                       f"{said}){_log_tail(d)}")
    end = time.monotonic() + WAIT_S
    while not _pipe_there(d):
        if time.monotonic() > end:
            raise MpsError(f"{d.name()}: {CONTROL_BINARY} started, but its pipe {d.control} "
                           f"did not appear in {WAIT_S:g} s{_log_tail(d)}")
        time.sleep(0.05)
    return (f"{d.name()}: MPS control daemon started (pid {daemon_pid(d) or 'unknown'}); "
            f"pipes {d.pipe_dir}, logs {d.log_dir}")


def stop(d: Daemon, running: List[str]) -> str:
    """Stop d's daemon with its `quit`, wait for it to go, and clear what it
    left; running: the containers on the card (their MPS clients lose their
    server). What to print."""
    now, pid = state(d)
    if now == DOWN and pid is None:
        return f"{d.name()}: MPS control daemon not running; nothing to stop"
    if pid is not None:
        try:
            subprocess.run([control_binary()], env=d.env(), input="quit\n", text=True,
                           capture_output=True, timeout=30)
        except subprocess.TimeoutExpired:
            pass  # waited on below, and said if it stays
        end = time.monotonic() + WAIT_S
        while daemon_pid(d) is not None:
            if time.monotonic() > end:
                raise MpsError(f"{d.name()}: the MPS control daemon (pid {pid}) did not quit "
                               f"in {WAIT_S:g} s{_log_tail(d)}; stop it with kill {pid}")
            time.sleep(0.05)
    _clear_pipes(d)
    held = f"; its containers lost their MPS server: {', '.join(running)}" if running else ""
    return f"{d.name()}: MPS control daemon stopped{held}"


def status_line(d: Daemon, holders: List[str]) -> Tuple[bool, str]:
    """(up, one line) for `gpuslice mps status`."""
    now, pid = state(d)
    held = f", {len(holders)} container(s)" if holders else ", no container"
    if now == UP:
        return True, f"{d.name()}: mps, daemon up (pid {pid}), pipes {d.pipe_dir}{held}"
    if now == STALE:
        return False, (f"{d.name()}: mps, daemon gone but its pipe is left{held}; "
                       f"`gpuslice mps start {d.card.index}` clears it and starts one")
    return False, (f"{d.name()}: mps, daemon down{held}; slices of it are refused until "
                   f"`gpuslice mps start {d.card.index}`")
