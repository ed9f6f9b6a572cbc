"""The `gpuslice` command line: a thin layer over the cdi and ocihook libraries.

Every failure the user can fix (a bad configuration, a host without a driver,
an invalid spec) is one line on stderr and exit status 2; `--check` and
`validate` answer "no" with status 1.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, List, Optional

import click

from ocihook import config as config_mod
from ocihook.clitext import examples
from ocihook.messages import EXIT_NO, error as fail, error_line, warn

if TYPE_CHECKING:
    from ocihook import accountant


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    # Eager and read only when asked: importlib.metadata is not free at every start.
    if not value or ctx.resilient_parsing:
        return
    from ocihook.version import version

    click.echo(f"gpuslice version {version()}")
    ctx.exit()


class State:
    def __init__(self, config_path: Optional[str]) -> None:
        self.config_path = config_path
        self._config: Optional[config_mod.Config] = None

    @property
    def config(self) -> config_mod.Config:
        if self._config is None:
            try:
                self._config = config_mod.load(self.config_path)
            except config_mod.ConfigError as e:
                fail(str(e))
        return self._config


@click.group(context_settings={"help_option_names": ["-h", "--help"]},
             epilog=examples("gpuslice cdi generate",
                             "podman run --rm --device gpuslice.io/gpu=0-4g IMAGE nvidia-smi",
                             "gpuslice status"))
@click.option("--config", "config_path", metavar="FILE",
              help=f"configuration file [default: ${config_mod.ENV_VAR} or {config_mod.DEFAULT_PATH}]")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Print gpuslice's version and exit.")
@click.pass_context
def cli(ctx: click.Context, config_path: Optional[str]) -> None:
    """Share NVIDIA GPUs between containers: memory slices and compute caps."""
    ctx.obj = State(config_path)


# -- config -----------------------------------------------------------------

@cli.group("config", epilog=examples("gpuslice config check /etc/gpuslice/config.yaml"))
def config_group() -> None:
    """Show, check or apply the configuration."""


@config_group.command("show", epilog=examples("gpuslice config show",
                                               "gpuslice --config ./node.yaml config show --format json"))
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml",
              show_default=True, help="output format")
@click.pass_obj
def config_show(state: State, fmt: str) -> None:
    """Print the effective configuration (file values over defaults)."""
    doc = state.config.to_dict()
    if fmt == "json":
        import json

        click.echo(json.dumps(doc, indent=2))
    else:
        from cdi import yamlout

        source = state.config.source or "built-in defaults (no configuration file)"
        click.echo(f"# effective configuration from {source}")
        click.echo(yamlout.dump(doc), nl=False)


@config_group.command("apply", short_help="Record the file's admission policy in the accountant.",
                      epilog=examples("gpuslice config apply"))
@click.pass_obj
def config_apply(state: State) -> None:
    """Record the file's admission policy in the accountant (placement,
    memory_overcommit, cores_limit); admissions follow it from the next one on.
    The CDI spec is not touched."""
    from ocihook import accountant
    from ocihook.status import policy_words

    policy = state.config.policy()
    acct = _accountant(state)
    try:
        changed = acct.set_policy(policy)
    except accountant.AccountantError as e:
        fail(str(e))
    finally:
        acct.close()
    click.echo(f"{state.config.database}: admission policy "
               f"{'recorded' if changed else 'already recorded'}: {policy_words(policy)}")


@config_group.command("check", short_help="Check a configuration FILE.",
                      epilog=examples("gpuslice config check /etc/gpuslice/config.yaml"))
@click.argument("file")  # what FILE is, config_mod.check_file says in its one line
def config_check(file: str) -> None:
    """Check one configuration FILE; say what is wrong, or that it is valid."""
    try:
        config_mod.check_file(file)
    except config_mod.ConfigError as e:
        for line in e.problems[:-1]:
            error_line(line)
        fail(e.problems[-1])
    click.echo(f"{file}: valid")


# -- cdi --------------------------------------------------------------------

@cli.group("cdi", epilog=examples("gpuslice cdi generate", "gpuslice cdi list"))
def cdi_group() -> None:
    """Generate, list and validate CDI specs."""


@cdi_group.command("generate", epilog=examples(
    "gpuslice cdi generate",
    "gpuslice cdi generate --check    # exit 1: the spec is stale",
    "gpuslice cdi generate --format json -o - | jq '.devices[].name'"))
@click.option("--driver-root", metavar="DIR", help="root of the driver's files [config: driver_root]")
@click.option("--dev-root", metavar="DIR", help="root holding /dev/nvidia* [config: dev_root]")
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml",
              show_default=True, help="the spec's format")
@click.option("--output", "-o", metavar="PATH",
              help="file to write, or - for stdout [default: SPEC_DIR/gpuslice.FORMAT]")
@click.option("--dry-run", is_flag=True, help="discover and validate; write nothing")
@click.option("--check", "check_only", is_flag=True,
              help="compare the spec on disk with this host; exit 1 if it is stale")
@click.pass_obj
def cdi_generate(state: State, driver_root: Optional[str], dev_root: Optional[str], fmt: str,
                 output: Optional[str], dry_run: bool, check_only: bool) -> None:
    """Describe this host's GPUs, whole and sliced, as a CDI spec."""
    from ocihook import generate_cmd

    sys.exit(generate_cmd.run(state.config, generate_cmd.Request(
        driver_root=driver_root, dev_root=dev_root, fmt=fmt, output=output,
        dry_run=dry_run, check_only=check_only, config_path=state.config_path)))


@cdi_group.command("list", epilog=examples("gpuslice cdi list",
                                            "gpuslice cdi list --spec-dir /var/run/cdi"))
@click.option("--spec-dir", "spec_dirs", multiple=True, metavar="DIR",
              help="folder to read (repeatable) [default: config spec_dir]")
@click.pass_obj
def cdi_list(state: State, spec_dirs: List[str]) -> None:
    """Print every fully qualified device name a runtime will accept.

    A slice of a card in MPS mode says so after its name."""
    from cdi.limits import MPS_PIPE_ENV
    from cdi.names import qualified
    from cdi.specfile import load_specs

    good, bad = load_specs(list(spec_dirs) or [state.config.spec_dir])
    for line in bad:
        warn(f"ignored, as a runtime would: {line}")
    for _path, spec in good:
        for dev in spec.devices:
            mps = any(e.startswith(f"{MPS_PIPE_ENV}=") for e in dev.edits.env)
            click.echo(qualified(spec.kind, dev.name) +
                       ("  (mode mps: its compute cap is an SM share)" if mps else ""))


@cdi_group.command("validate", short_help="Check CDI spec FILES against the specification.",
                   epilog=examples("gpuslice cdi validate /etc/cdi/*.yaml"))
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
def cdi_validate(files: List[str]) -> None:
    """Check CDI spec FILES, ours or any vendor's, against the specification."""
    from cdi.specfile import read_spec
    from cdi.spec import SpecError

    status = 0
    for path in files:
        try:
            spec = read_spec(path)
        except SpecError as e:
            click.echo(f"{e}", err=True)
            status = EXIT_NO
            continue
        click.echo(f"{path}: valid (kind {spec.kind}, cdiVersion {spec.version}, "
                   f"{len(spec.devices)} devices)")
    sys.exit(status)


# -- setup ------------------------------------------------------------------

@cli.group("setup", short_help="Point Docker, containerd or Podman at gpuslice.",
           epilog=examples("gpuslice setup docker --dry-run", "gpuslice setup docker"))
def setup_group() -> None:
    """Point Docker, containerd or Podman at gpuslice (edits their configuration).

    Each prints the change as a unified diff on stdout and writes it, keeping
    the old file as FILE.gpuslice-backup; --dry-run writes nothing. A second
    run changes nothing.
    """


@setup_group.command("docker", short_help="Make Docker run gpuslice's devices (by its version).",
                     epilog=examples("gpuslice setup docker --dry-run",
                                     "gpuslice setup docker && systemctl restart docker"))
@click.option("--daemon-json", metavar="PATH", default="/etc/docker/daemon.json",
              show_default=True, help="dockerd's configuration file")
@click.option("--name", metavar="NAME", default="gpuslice", show_default=True,
              help="runtime name, for docker run --runtime NAME")
@click.option("--real-runtime", metavar="PATH",
              help="the OCI runtime gpuslice-runtime runs [default: runc from PATH]")
@click.option("--docker-version", metavar="X.Y",
              help="the daemon's version [default: what dockerd --version prints]")
@click.option("--dry-run", is_flag=True, help="print the diff; write nothing")
@click.pass_obj
def setup_docker(state: State, daemon_json: str, name: str, real_runtime: Optional[str],
                 docker_version: Optional[str], dry_run: bool) -> None:
    """Docker 20-24: add gpuslice-runtime to daemon.json's runtimes. Docker 25
    and later: have dockerd read the spec (features.cdi before 28.2, and
    cdi-spec-dirs where it needs our spec dir)."""
    from ocihook.setup import docker

    sys.exit(docker.setup(state.config, daemon_json, name, real_runtime, dry_run,
                          docker_version))


@setup_group.command("containerd",
                     short_help="Make containerd run gpuslice's devices (by its version).",
                     epilog=examples("gpuslice setup containerd --dry-run",
                                     "gpuslice setup containerd && systemctl restart containerd"))
@click.option("--config", "config_toml", metavar="PATH", default="/etc/containerd/config.toml",
              show_default=True, help="containerd's configuration file")
@click.option("--name", metavar="NAME", default="gpuslice", show_default=True,
              help="runtime name, for CRI clients (containerd 1.6)")
@click.option("--containerd-version", metavar="X.Y",
              help="the daemon's version [default: what containerd --version prints]")
@click.option("--dry-run", is_flag=True, help="print the diff; write nothing")
@click.pass_obj
def setup_containerd(state: State, config_toml: str, name: str,
                     containerd_version: Optional[str], dry_run: bool) -> None:
    """containerd 1.6: add a CRI runtime that runs gpuslice-runtime.
    containerd 1.7 and 2.x: CRI's enable_cdi, and cdi_spec_dirs where it needs
    our spec dir."""
    from ocihook.setup import containerd

    sys.exit(containerd.setup(state.config, config_toml, name, dry_run, containerd_version))


@setup_group.command("podman", epilog=examples(
    "gpuslice setup podman --dry-run",
    "gpuslice setup podman && podman run --rm --device gpuslice.io/gpu=0-4g IMAGE nvidia-smi"))
@click.option("--containers-conf", metavar="PATH", default="/etc/containers/containers.conf",
              show_default=True, help="Podman's configuration file")
@click.option("--podman-version", metavar="X.Y",
              help="Podman's version [default: what podman --version prints]")
@click.option("--dry-run", is_flag=True, help="print the diff; write nothing")
@click.pass_obj
def setup_podman(state: State, containers_conf: str, podman_version: Optional[str],
                 dry_run: bool) -> None:
    """Make sure Podman reads the CDI spec dir (it reads CDI itself). Podman
    4.1-4.3 read only /etc/cdi and /var/run/cdi: there spec_dir must be one of
    them."""
    from ocihook.setup import podman

    sys.exit(podman.setup(state.config, containers_conf, dry_run, podman_version))


# -- the accountant -----------------------------------------------------------

def _accountant(state: State) -> "accountant.Accountant":
    from ocihook import accountant

    try:
        return accountant.Accountant(state.config.database)
    except accountant.AccountantError as e:
        fail(str(e))


@cli.command("status", short_help="Per card: what is reserved and used, and by whom.",
             epilog=examples("gpuslice status", "gpuslice status --json | jq '.cards[0]'"))
@click.option("--json", "as_json", is_flag=True, help="one JSON document, for scripts")
@click.pass_obj
def status_cmd(state: State, as_json: bool) -> None:
    """Per card: reserved, used now, free, and each container with its slice."""
    from ocihook import room, status

    acct = _accountant(state)
    try:
        doc = status.collect(state.config, acct)
    except room.RoomError as e:
        fail(str(e))
    if as_json:
        import json

        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(status.render(doc))


def _run_hook(cfg: "config_mod.Config", verb: str, *args: str) -> None:
    """gpuslice-hook does every write to the reservations (the one writer);
    its lines and its exit status are this command's."""
    import subprocess

    argv = [cfg.hook_path, verb, *args, *cfg.hook_common_args()]
    try:
        res = subprocess.run(argv, stdin=subprocess.DEVNULL)
    except OSError as e:
        fail(f"cannot run {cfg.hook_path}: {e.strerror}; is gpuslice-hook installed "
             "(configuration key hook_path)?")
    sys.exit(res.returncode)


@cli.command("release", short_help="Give back what a container holds.",
             epilog=examples("gpuslice release \"$(podman inspect --format '{{.Id}}' web)\""))
@click.argument("container_id")
@click.pass_obj
def release_cmd(state: State, container_id: str) -> None:
    """Give back what a container holds (for an operator; poststop does it normally)."""
    _run_hook(state.config, "release", "--id", container_id)


@cli.command("gc", epilog=examples("gpuslice gc"))
@click.pass_obj
def gc_cmd(state: State) -> None:
    """Reclaim what containers whose process is gone still hold."""
    _run_hook(state.config, "gc")


@cli.command("resize", short_help="Change the slice a running container holds.",
             epilog=examples("gpuslice resize 3f2a9c --memory 6g",
                             "gpuslice resize 3f2a9c --memory 8GiB --cores 50"))
@click.argument("container")
@click.option("--memory", metavar="SIZE", help="the slice's new memory (4GiB, 6144MiB, 8g)")
@click.option("--cores", metavar="N", help="the new compute cap, percent (0: none)")
@click.pass_obj
def resize_cmd(state: State, container: str, memory: Optional[str], cores: Optional[str]) -> None:
    """Change the slice a running container holds (its id, an id prefix, or its
    name): checked against its card as an admission is; its
    processes see the new cap at their next allocation. A shrink below what they
    hold now is refused."""
    from ocihook import engine_names, resize

    acct = _accountant(state)
    try:
        args = resize.hook_args(resize.find(acct, container, engine_names.lookup(state.config)),
                                memory, cores)
    except resize.ResizeError as e:
        fail(str(e))
    finally:
        acct.close()
    _run_hook(state.config, "resize", *args)


# -- observing the node ----------------------------------------------------------

@cli.command("exporter", short_help="Serve Prometheus metrics of the node.",
             epilog=examples("gpuslice exporter", "gpuslice exporter --listen :10463",
                             "curl -s http://127.0.0.1:10463/metrics | grep ^gpuslice_card"))
@click.option("--listen", metavar="ADDR:PORT", default="127.0.0.1:10463", show_default=True,
              help="where to serve /metrics ([::1]:PORT for IPv6, :PORT for every address)")
@click.pass_obj
def exporter_cmd(state: State, listen: str) -> None:
    """Serve Prometheus metrics of the cards, containers and processes (docs/metrics.md)."""
    from ocihook import engine_names, exporter

    try:
        where = exporter.parse_listen(listen)
    except exporter.ListenError as e:
        fail(str(e))
    cfg = state.config
    try:
        exporter.serve(cfg.state_dir, cfg.database, cfg.driver_root, where,
                       engine_names.lookup(cfg))
    except OSError as e:
        fail(f"--listen {listen}: cannot serve there: {e.strerror}; pick a free port or "
             "another address")


@cli.command("top", short_help="Cards, containers and processes, live.",
             epilog=examples("gpuslice top", "gpuslice top --once"))
@click.option("--once", is_flag=True, help="print one frame (rates over one second) and exit")
@click.pass_obj
def top_cmd(state: State, once: bool) -> None:
    """Cards, containers and processes live: memory against the slice, card time
    against the cap, throttling, priority, health. q quits."""
    from ocihook import engine_names, top

    cfg = state.config
    source = top.Source(cfg.state_dir, cfg.database, cfg.driver_root,
                        engine_names.lookup(cfg))
    if once:
        click.echo(top.once(source))
    elif not sys.stdout.isatty():
        fail("gpuslice top: standard output is not a terminal; use `gpuslice top --once` "
             "in scripts")
    else:
        top.live(source)


# -- health -------------------------------------------------------------------

@cli.group("health", epilog=examples("systemctl status gpuslice-health"))
def health_group() -> None:
    """Watch the cards' health (NVML's events) for the accountant."""


@health_group.command("watch", short_help="Take a card out of service when NVML reports a fault.",
                      epilog=examples("gpuslice health watch",
                                      "gpuslice health watch --ignore-xid 94 --for 60"))
@click.option("--ignore-xid", "ignored", multiple=True, type=click.IntRange(0, 2**32 - 1),
              metavar="XID", help="an XID that leaves a card in service (repeatable; the "
              "applications' XIDs 13, 31, 43, 45, 68, 109 always do)")
@click.option("--for", "seconds", type=click.FloatRange(min=0, min_open=True), metavar="S",
              help="stop after S seconds [default: until SIGTERM]")
@click.pass_obj
def health_watch(state: State, ignored: List[int], seconds: Optional[float]) -> None:
    """Take a card out of service on a critical XID, a double-bit ECC error or
    when it is lost; `gpuslice card enable N` returns it. Runs until SIGTERM
    (gpuslice-health.service)."""
    import signal
    import time

    from ocihook.health import Watcher
    from ocihook.messages import say

    stopped = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.append(True))
    end = time.monotonic() + seconds if seconds else None
    cfg = state.config
    Watcher(cfg.database, say, cfg.driver_root, ignored).run(
        lambda: bool(stopped) or (end is not None and time.monotonic() >= end))
    say("health: stopped")


# -- card -------------------------------------------------------------------

@cli.group("card", short_help="Take a card out of service, or return it.",
           epilog=examples("gpuslice card disable 1 --reason 'fan replaced, ticket 4711'",
                           "gpuslice card enable 1"))
def card_group() -> None:
    """Take a card out of service, or return it (running containers stay)."""


@card_group.command("disable", epilog=examples(
    "gpuslice card disable 1 --reason 'fan replaced, ticket 4711'",
    "gpuslice card disable GPU-5f6e1c2a-1c4d-4b7e-9a5e-0d6c3f1e2b7a --reason 'ECC errors'"))
@click.argument("card")
@click.option("--reason", required=True, metavar="TEXT",
              help="why, in one line: the hook's refusals quote it")
@click.pass_obj
def card_disable(state: State, card: str, reason: str) -> None:
    """Refuse new slices and whole cards on CARD (its index or UUID)."""
    from ocihook import cards

    acct = _accountant(state)
    try:
        click.echo(cards.disable(acct, card, reason))
    except cards.CardError as e:
        fail(str(e))
    finally:
        acct.close()


@card_group.command("enable", epilog=examples("gpuslice card enable 1"))
@click.argument("card")
@click.pass_obj
def card_enable(state: State, card: str) -> None:
    """Return CARD (its index or UUID) to service, whatever took it out."""
    from ocihook import cards

    acct = _accountant(state)
    try:
        click.echo(cards.enable(acct, card))
    except cards.CardError as e:
        fail(str(e))
    finally:
        acct.close()


# -- mps --------------------------------------------------------------------

@cli.group("mps", short_help="Run the NVIDIA MPS control daemon of cards in MPS mode.",
           epilog=examples("gpuslice mps start 0", "gpuslice mps status",
                           "systemctl enable --now gpuslice-mps@0"))
def mps_group() -> None:
    """The MPS control daemon of each card in MPS mode (configuration
    card_modes), its folders under the state dir."""


def _mps_each(state: State, card: Optional[str], verb: str) -> None:
    from ocihook import mps

    acct = _accountant(state)
    failed = False
    try:
        for d in mps.daemons(state.config, acct, card):
            if verb == "start":
                click.echo(mps.start(state.config, d))
            elif verb == "stop":
                click.echo(mps.stop(d, acct.holders(d.card.uuid)))
            else:
                up, line = mps.status_line(d, acct.holders(d.card.uuid))
                failed = failed or not up
                click.echo(line)
    except mps.MpsError as e:
        fail(str(e))
    finally:
        acct.close()
    if failed:
        sys.exit(EXIT_NO)


@mps_group.command("start", epilog=examples("gpuslice mps start", "gpuslice mps start 0"))
@click.argument("card", required=False)
@click.pass_obj
def mps_start(state: State, card: Optional[str]) -> None:
    """Start the daemon of CARD (index or UUID), or of all MPS cards."""
    _mps_each(state, card, "start")


@mps_group.command("stop", epilog=examples("gpuslice mps stop 0"))
@click.argument("card", required=False)
@click.pass_obj
def mps_stop(state: State, card: Optional[str]) -> None:
    """Stop the daemon of CARD, or of every card in MPS mode.

    The containers on the card lose their MPS server; they are listed."""
    _mps_each(state, card, "stop")


@mps_group.command("status", epilog=examples("gpuslice mps status"))
@click.argument("card", required=False)
@click.pass_obj
def mps_status(state: State, card: Optional[str]) -> None:
    """Whether each daemon is up (exit 1 if one is not)."""
    _mps_each(state, card, "status")


from ocihook.slurm.cli import slurm_group  # noqa: E402 (its commands use the group above)

cli.add_command(slurm_group)


def main() -> None:
    cli(prog_name="gpuslice")


# Last: `python3 -m ocihook.cli` runs the group only once every command is on it.
if __name__ == "__main__":
    main()
