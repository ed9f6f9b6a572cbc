"""`gpuslice cdi generate`: discovery, assembly, then write, print or check.

Kept apart from the click layer so that tests and the package's post-install
step can call it as a function.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from ocihook import statedir
from ocihook.config import Config
from ocihook.messages import EXIT_NO, error, error_line, say, warn

if TYPE_CHECKING:
    from ocihook import accountant
    from cdi.generate import MpsFolders
    from cdi.spec import Spec
    from cdi.nvml import Gpu, Inventory


@dataclass
class Request:
    driver_root: Optional[str] = None
    dev_root: Optional[str] = None
    fmt: str = "yaml"
    output: Optional[str] = None
    dry_run: bool = False
    check_only: bool = False
    config_path: Optional[str] = None  # as the user gave it, for the refresh command
    sys_root: str = "/sys"


def default_output(cfg: Config, fmt: str) -> str:
    return os.path.join(cfg.spec_dir, f"gpuslice.{fmt}")


def refresh_command(req: Request) -> str:
    parts = ["gpuslice"]
    if req.config_path:
        parts += ["--config", req.config_path]
    parts += ["cdi", "generate"]
    for flag, value in (("--driver-root", req.driver_root), ("--dev-root", req.dev_root),
                        ("--output", req.output)):
        if value:
            parts += [flag, value]
    if req.fmt != "yaml":
        parts += ["--format", req.fmt]
    return " ".join(parts)


def ensure_card_dir(path: str) -> None:
    """The folder every slice mounts read-write: any tenant, whatever its user,
    creates and writes its card's file there (sticky: none removes another's).
    gpuslice-hook makes it the same way if it is missing."""
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o1777)


def ensure_mps_dirs(cfg: Config, inventory: "Inventory") -> None:
    """The folders a slice of an MPS card mounts (its pipes, its /dev/shm),
    made before any container asks: the runtime mounts them before the hook
    runs, and a missing one would fail the start with the runtime's words
    instead of the hook's refusal (its daemon is down). Modes as
    `gpuslice mps start` makes them."""
    from ocihook import mps

    for uuid in mps_cards(cfg, inventory):
        mps.make_folders(cfg.state_dir, uuid)


def card_mode(cfg: Config, gpu: "Gpu") -> str:
    """The mode the configuration gives a card; a MIG card is always in time
    mode: it is offered whole only."""
    from cdi.limits import MODE_TIME

    return MODE_TIME if gpu.mig else cfg.mode_of(gpu.index, gpu.uuid)


def recorded_cards(inventory: "Inventory", cfg: Config
                   ) -> "Tuple[List[accountant.Card], List[accountant.CardLink]]":
    """The cards as the accountant records them: with their places and the links
    between them (what gang placement reads), and the mode the configuration
    gives each (card_mode)."""
    from cdi.topology import Place
    from ocihook import accountant

    topo = inventory.topology
    uuid = {g.index: g.uuid for g in inventory.gpus}
    cards = []
    for g in inventory.gpus:
        place = topo.places.get(g.index, Place(None, "")) if topo else Place(None, "")
        cards.append(accountant.Card(g.index, g.uuid, g.memory_mib, g.name, g.mig,
                                     pci_bus_id=g.pci_bus_id, numa_node=place.numa_node,
                                     cpu_affinity=place.cpu_affinity,
                                     mode=card_mode(cfg, g)))
    links = [accountant.CardLink(uuid[k.a], uuid[k.b], k.pcie, k.nvlinks)
             for k in (topo.links if topo else [])]
    return cards, links


def sync_accountant(cfg: Config, inventory: "Inventory") -> None:
    """Tell the accountant which cards there are and the node's admission policy
    (the configuration's): the hook admits against both."""
    from ocihook import accountant

    try:
        acct = accountant.Accountant(cfg.database)
    except accountant.AccountantError as e:
        error(f"{e}; gpuslice-hook admits against the cards recorded there, so no device "
              "of the spec could start")
    try:
        acct.sync_cards(*recorded_cards(inventory, cfg))
        acct.set_policy(cfg.policy())
    except accountant.ModeChangeRefused as e:
        error_line(f"{e}; the spec was not written")
        sys.exit(EXIT_NO)
    except accountant.AccountantError as e:
        error(str(e))
    finally:
        acct.close()


def mps_cards(cfg: Config, inventory: "Inventory") -> "Dict[str, MpsFolders]":
    """The cards the configuration puts in MPS mode, by UUID, with their
    daemon's folders under the state dir (card_mode)."""
    from cdi.generate import MpsFolders
    from cdi.limits import MODE_MPS

    return {g.uuid: MpsFolders(statedir.mps_pipe_dir(cfg.state_dir, g.uuid),
                               statedir.mps_shm_dir(cfg.state_dir, g.uuid))
            for g in inventory.gpus
            if card_mode(cfg, g) == MODE_MPS}


def unknown_mode_cards(cfg: Config, inventory: "Inventory") -> List[str]:
    """card_modes entries that name no card NVML lists, one line each."""
    known = {str(g.index) for g in inventory.gpus} | {g.uuid for g in inventory.gpus}
    return [f"card_modes names card {card}, which NVML does not list: ignored"
            for card in cfg.card_modes if card not in known]


def build(cfg: Config, req: Request) -> Tuple["Spec", List[str], "Inventory"]:
    """Discover this host and assemble its spec: (Spec, warnings, what was discovered)."""
    from cdi import driverfiles, nvml
    from cdi.generate import GenerateOptions, build_spec

    driver_root = req.driver_root or cfg.driver_root
    dev_root = req.dev_root or cfg.dev_root
    for what, root in (("driver root", driver_root), ("dev root", dev_root)):
        if not os.path.isdir(root):
            raise nvml.DiscoveryError(f"{what} {root} is not a folder")
    # Look for the driver's files before asking NVML: "no driver here" is the
    # likelier fault, and NVML must come from that driver root.
    nvml_path = driverfiles.nvml_library(driver_root)
    inventory = nvml.discover(nvml_path if driver_root != "/" else None, req.sys_root)
    opts = GenerateOptions(
        kind=cfg.cdi_kind, profiles=cfg.profiles, driver_root=driver_root, dev_root=dev_root,
        sys_root=req.sys_root, shim_path=cfg.shim_path, hook_path=cfg.hook_path,
        card_dir=cfg.card_dir(), card_dir_mount=statedir.card_files_mount(),
        hook_common=cfg.hook_common_args(),
        hook_create=cfg.hook_create_args(),
        hook_installed=os.access(cfg.hook_path, os.X_OK),
        mps=mps_cards(cfg, inventory),
    )
    spec, warnings = build_spec(inventory, opts)
    return spec, warnings + unknown_mode_cards(cfg, inventory), inventory


def run(cfg: Config, req: Request) -> int:
    """Do what the request asks; return the exit status (errors exit at once)."""
    from cdi import check, specfile
    from cdi.nvml import DiscoveryError
    from cdi.spec import SpecError

    output = req.output or default_output(cfg, req.fmt)
    if req.check_only and output == "-":
        error("--check compares a spec file; it cannot read --output -")
    try:
        spec, warnings, inventory = build(cfg, req)
    except (DiscoveryError, SpecError) as e:
        error(str(e))
    for w in warnings:
        warn(w)
    if not req.dry_run and not req.check_only:
        try:
            ensure_card_dir(cfg.card_dir())
            ensure_mps_dirs(cfg, inventory)
        except OSError as e:
            error(f"cannot make the folder {e.filename}: {e.strerror}")
    for path in check.missing_on_host(spec):
        warn(f"{path} does not exist: containers that ask for a device needing it will "
             "fail to start until it is installed")

    if req.check_only:
        try:
            stale = check.problems(specfile.read_spec(output), spec)
        except SpecError as e:
            stale = [str(e)]
        if stale:
            for line in stale:
                say(f"stale: {output}: {line}")
            say(f"refresh it with: {refresh_command(req)}")
            return EXIT_NO
        print(f"{output}: up to date ({len(spec.devices)} devices)")
        return 0

    text = specfile.render(spec, req.fmt)
    if output == "-":
        print(text, end="")
        return 0
    summary = f"{output}: kind {spec.kind}, cdiVersion {spec.version}, {len(spec.devices)} devices"
    if req.dry_run:
        print(f"would write {summary}")
        return 0
    sync_accountant(cfg, inventory)
    try:
        specfile.write_atomic(output, text)
        if req.output is None:
            # Our spec in both formats would offer every device twice.
            other = default_output(cfg, "json" if req.fmt == "yaml" else "yaml")
            if os.path.exists(other):
                os.unlink(other)
    except OSError as e:
        error(f"cannot write {output}: {e.strerror}")
    print(f"wrote {summary}")
    return 0
