"""gpuslice's configuration file: defaults, loading, validation.

The file is YAML (``/etc/gpuslice/config.yaml``, or ``--config`` /
``GPUSLICE_CONFIG``), read by the `gpuslice` command and by
gpuslice-cdi-cache; gpuslice-hook (C) reads none: `gpuslice cdi
generate` writes what it needs into its arguments. Every key is optional and
documented in docs/configuration.md.

The file is read as its author may have made it: a regular file only (a
FIFO or a device is refused, never waited on), at most MAX_BYTES, UTF-8,
without YAML anchors or aliases, nested at most cdi.yamlin.MAX_DEPTH deep.
The values with a rule of their own (memory_overcommit, card_modes, a
profile's memory, cores and priority) are checked here first, so that the message says what to
write instead; then the structure against config_schema.json with
cdi.schemalite (`gpuslice config check` runs jsonschema as well); then the
rest a schema cannot say (names, duplicates). A bad file raises ConfigError
with one line that names the file, the key, the value and the rule.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from cdi import names, regularfile
from cdi.limits import DEFAULT_PRIORITY, MODE_TIME, MODES
from cdi.profiles import Profile, ProfileError, validate_priority, validate_profile_name
from ocihook import statedir, units
from ocihook.policy import (CORES_LIMIT_MAX, CORES_LIMIT_MIN, OVERCOMMIT_MAX, OVERCOMMIT_MIN,
                            Policy)

DEFAULT_PATH = "/etc/gpuslice/config.yaml"
ENV_VAR = "GPUSLICE_CONFIG"
SCHEMA_PATH = Path(__file__).with_name("config_schema.json")
MAX_BYTES = 1 << 20  # a configuration is a few KiB; this bounds what a wrong file costs
PATH_KEYS = ("spec_dir", "driver_root", "dev_root", "state_dir", "database", "shim_path",
             "hook_path", "runtime_path", "podman_storage", "docker_root")

DEFAULT_PROFILES: Tuple[Profile, ...] = (
    Profile("1g", 1024), Profile("2g", 2048), Profile("4g", 4096), Profile("8g", 8192),
    Profile("16g", 16384), Profile("32g", 32768), Profile("4g-30", 4096, 30),
    Profile("8g-50", 8192, 50),
)


def _default_shim_path() -> str:
    # `pip install .` ships the shim inside the package; distro packages and
    # editable installs put it in /usr/lib/gpuslice.
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native", "libgpuslice.so")
    return bundled if os.path.exists(bundled) else "/usr/lib/gpuslice/libgpuslice.so"


def _default_hook_path() -> str:
    # The hook is installed beside the `gpuslice` command, wherever pip or the
    # distro package put the scripts of this installation.
    import sysconfig

    return os.path.join(sysconfig.get_path("scripts"), "gpuslice-hook")


def _default_runtime_path() -> str:
    # The OCI runtime wrapper, beside the `gpuslice` command as the hook is.
    import sysconfig

    return os.path.join(sysconfig.get_path("scripts"), "gpuslice-runtime")


class ConfigError(ValueError):
    """A configuration that cannot be used: one line naming key, value and rule
    (the first problem), and every problem found (`config check` says them
    all)."""

    def __init__(self, message: str, problems: Optional[List[str]] = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


@dataclass
class Config:
    cdi_kind: str = "gpuslice.io/gpu"
    spec_dir: str = "/etc/cdi"
    profiles: List[Profile] = field(default_factory=lambda: list(DEFAULT_PROFILES))
    driver_root: str = "/"
    dev_root: str = "/"
    state_dir: str = "/run/gpuslice"
    database: str = "/var/lib/gpuslice/state.db"
    placement: str = "binpack"
    preload: str = "env"  # or "ld.so.preload": the hook adds the shim to /etc/ld.so.preload
    memory_overcommit: float = 1.0
    cores_limit: int = 100  # the sum of compute caps one card may carry
    shim_path: str = field(default_factory=_default_shim_path)
    hook_path: str = field(default_factory=_default_hook_path)
    runtime_path: str = field(default_factory=_default_runtime_path)
    # Where the engines keep their containers' names (ocihook/engine_names.py).
    podman_storage: str = "/var/lib/containers/storage"
    docker_root: str = "/var/lib/docker"
    slurm_shards: int = 8  # gres/shard count of each card (docs/slurm.md)
    slurm_cores: bool = False  # a job of k shards also gets a k/N compute cap
    # A card's sharing mode by its index ("0") or UUID: cdi.limits.MODES;
    # a card not named is in MODE_TIME (docs/compute-limit.md, Two modes).
    card_modes: Dict[str, str] = field(default_factory=dict)
    source: Optional[str] = None  # the file it came from; None for built-in defaults

    def card_dir(self) -> str:
        """The host's card files, which every slice mounts: <state_dir>/cards."""
        return statedir.card_files_dir(self.state_dir)

    def hook_common_args(self) -> List[str]:
        """What every gpuslice-hook run is told: where the books and the state dirs are."""
        return ["--database", self.database, "--state-dir", self.state_dir]

    def hook_create_args(self) -> List[str]:
        """How gpuslice-hook create preloads the shim (it reads no configuration file)."""
        return ["--preload", self.preload]

    def mode_of(self, index: int, uuid: str) -> str:
        """The mode the file gives the card of this index and UUID (the
        UUID's entry wins over the index's)."""
        return self.card_modes.get(uuid, self.card_modes.get(str(index), MODE_TIME))

    def policy(self) -> Policy:
        """The admission policy this file asks for; the hook admits by the one
        recorded in the accountant, which `gpuslice cdi generate` and `gpuslice
        config apply` write from here."""
        return Policy(self.placement, self.memory_overcommit, self.cores_limit)

    def to_dict(self) -> Dict[str, Any]:
        """The effective configuration in the file's own shape."""
        return {
            "cdi_kind": self.cdi_kind,
            "spec_dir": self.spec_dir,
            "profiles": [
                {"name": p.name, "memory": units.format_mib(p.memory_mib), "cores": p.cores,
                 "priority": p.priority}
                for p in self.profiles
            ],
            "driver_root": self.driver_root,
            "dev_root": self.dev_root,
            "state_dir": self.state_dir,
            "database": self.database,
            "placement": self.placement,
            "preload": self.preload,
            "memory_overcommit": self.memory_overcommit,
            "cores_limit": self.cores_limit,
            "shim_path": self.shim_path,
            "hook_path": self.hook_path,
            "runtime_path": self.runtime_path,
            "podman_storage": self.podman_storage,
            "docker_root": self.docker_root,
            "slurm_shards": self.slurm_shards,
            "slurm_cores": self.slurm_cores,
            "card_modes": dict(self.card_modes),
        }


def schema() -> Dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


Problem = Tuple[Tuple[Any, ...], str]  # where in the document (its keys), one line


def _schema_problems(source: str, doc: Any, validator: Any = None) -> List[Problem]:
    # cdi.schemalite, not jsonschema (whose import alone costs 100 ms): this
    # runs on every command, and whenever gpuslice-runtime has its CDI cache
    # made again. `gpuslice config check` runs jsonschema too.
    from cdi.schemalite import Validator, problems

    return [(path, f"{source}: {line}")
            for path, line in problems(validator or Validator(schema()), doc)]


def _profiles(items: List[Dict[str, Any]]) -> List[Profile]:
    """The profiles of a document whose problems() are none."""
    return [Profile(item["name"], units.parse_memory_mib(item["memory"]),
                    units.parse_cores(item.get("cores")),
                    item.get("priority", DEFAULT_PRIORITY)) for item in items]


def parse_memory_overcommit(value: Any) -> float:
    """The overcommit factor by the policy's rule: a number from 1.0 to 16.0
    (not nan, inf, a bool or a string), or ConfigError without the file."""
    # The comparisons refuse nan and inf too, and compare a huge int exactly.
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and OVERCOMMIT_MIN <= value <= OVERCOMMIT_MAX:
        return float(value)
    raise ConfigError(f"memory_overcommit {value!r} is not a number from {OVERCOMMIT_MIN} to "
                      f"{OVERCOMMIT_MAX} (memory reservable on a card, as a multiple of its "
                      "total); write e.g. 1.0 for none or 1.5")


def parse_cores_limit(value: Any) -> int:
    """The cores limit by the policy's rule: a whole number from 1 to 100 (50.0
    is one; a bool, a string or 50.5 is not), or ConfigError without the file."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and CORES_LIMIT_MIN <= value <= CORES_LIMIT_MAX and value == int(value):
        return int(value)
    raise ConfigError(f"cores_limit {value!r} is not a whole number from {CORES_LIMIT_MIN} to "
                      f"{CORES_LIMIT_MAX} (the sum of compute caps, in percent, that the slices "
                      "of one card may carry); write e.g. 100 for no limit or 80")


def parse_card_modes(value: Any) -> Dict[str, str]:
    """card_modes by its rule: a mapping of a card's index (0, 1, ...) or
    UUID (GPU-...) to one of cdi.limits.MODES, or ConfigError without the
    file. Keys come back as text: "0", "GPU-..."."""
    if not isinstance(value, dict):
        raise ConfigError(f"card_modes {value!r} is not a mapping of cards to modes; write "
                          "e.g. card_modes: {0: mps}")
    out: Dict[str, str] = {}
    for card, mode in value.items():
        key = str(card) if isinstance(card, int) and not isinstance(card, bool) else card
        if not isinstance(key, str) or not (key.isdigit() and key.isascii()
                                            or key.startswith("GPU-")):
            raise ConfigError(f"card_modes: {card!r} is not a card: name one by its index "
                              "(0, 1, ...) or UUID (GPU-...) as `gpuslice cdi list` shows")
        if mode not in MODES:
            raise ConfigError(f"card_modes: card {key}: {mode!r} is not a mode: write "
                              f"{' or '.join(MODES)} (time sharing is the default)")
        if key in out:
            raise ConfigError(f"card_modes: card {key} is named twice; keep one entry")
        out[key] = mode
    return out


def _path_problem(key: str, value: Any) -> Optional[str]:
    bad = next((c for c in value if ord(c) < 0x20 or c == "\x7f"), None) \
        if isinstance(value, str) else None
    if bad == "\0":
        return f"{key}: {value!r} holds a NUL character, which no path can; remove it"
    if bad is not None:
        # A path goes into hook arguments, CDI specs and log lines: a
        # newline there would split them.
        return (f"{key}: {value!r} holds the control character {bad!r}, which "
                "no path of gpuslice's may hold (it is written into CDI specs, hook "
                "arguments and log lines); remove it")
    return None


def _value_problems(source: str, doc: Dict[str, Any]) -> List[Problem]:
    """The values that break a rule of their own, each said with its fix:
    memory_overcommit, cores_limit, a path with a NUL or another control
    character (a newline) in it, and a profile's memory, cores and priority.
    Looked at before the schema is, whose type and enum messages name the
    rule but not what to write instead; what is not a mapping, or not a list
    of mappings, is left to the schema."""
    out: List[Problem] = []
    for key, parse in (("memory_overcommit", parse_memory_overcommit),
                       ("cores_limit", parse_cores_limit)):
        if key in doc:
            try:
                parse(doc[key])
            except ConfigError as e:
                out.append(((key,), f"{source}: {e}"))
    if "card_modes" in doc:
        try:
            parse_card_modes(doc["card_modes"])
        except ConfigError as e:
            out.append((("card_modes",), f"{source}: {e}"))
    for key in PATH_KEYS:
        problem = _path_problem(key, doc.get(key))
        if problem:
            out.append(((key,), f"{source}: {problem}"))
    items = doc.get("profiles")
    for i, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            continue
        for key, check in (("memory", units.parse_memory_mib), ("cores", units.parse_cores),
                           ("priority", validate_priority)):
            if key not in item:
                continue
            try:
                check(item[key])
            except (units.LimitError, ProfileError) as e:
                out.append((("profiles", i, key), f"{source}: profiles[{i}]: {e}"))
    return out


def _rule_problems(source: str, doc: Dict[str, Any]) -> List[Problem]:
    """What a schema cannot say, in a document the schema passes: profile
    names (their form and uniqueness) and the CDI kind."""
    out: List[Problem] = []
    seen: Dict[str, int] = {}
    for i, item in enumerate(doc.get("profiles", [])):
        name = item["name"]
        try:
            validate_profile_name(name)
        except ProfileError as e:
            out.append((("profiles", i, "name"), f"{source}: profiles[{i}]: {e}"))
        if name in seen:
            out.append((("profiles", i, "name"),
                        f"{source}: profiles[{i}]: profile name {name!r} is already used by "
                        f"profiles[{seen[name]}]; profile names must be unique"))
        seen.setdefault(name, i)
    try:
        names.validate_kind(doc.get("cdi_kind", Config.cdi_kind))
    except names.CdiNameError as e:
        out.append((("cdi_kind",), f"{source}: cdi_kind: {e}"))
    return out


def problems(doc: Any, source: str, validator: Any = None) -> List[str]:
    """Every problem of a parsed configuration, one line each, in the order of
    the checks: values with a rule of their own, then the structure (a
    value already said is not said again as a type error), then what the
    schema cannot say (only once the structure holds)."""
    if doc is None:
        doc = {}
    found = _value_problems(source, doc) if isinstance(doc, dict) else []
    said = [path for path, _ in found]
    structure = [(path, line) for path, line in _schema_problems(source, doc, validator)
                 if not any(path[:len(p)] == p for p in said)]
    found += structure
    if not structure:
        found += _rule_problems(source, doc)
    return [line for _, line in found]


def from_document(doc: Any, source: str) -> Config:
    """Build a Config from a parsed document, or raise ConfigError with its
    first problem."""
    if doc is None:
        doc = {}
    found = problems(doc, source)
    if found:
        raise ConfigError(found[0], found)
    return _built(doc, source)


def _built(doc: Dict[str, Any], source: str) -> Config:
    """The Config of a document that has no problems()."""
    cfg = Config(source=source)
    for key in ("cdi_kind", "spec_dir", "driver_root", "dev_root", "state_dir", "database",
                "placement", "preload", "shim_path", "hook_path", "runtime_path",
                "podman_storage", "docker_root",
                "slurm_shards", "slurm_cores"):
        if key in doc:
            setattr(cfg, key, doc[key])
    if "memory_overcommit" in doc:
        cfg.memory_overcommit = parse_memory_overcommit(doc["memory_overcommit"])
    if "cores_limit" in doc:
        cfg.cores_limit = parse_cores_limit(doc["cores_limit"])
    if "profiles" in doc:
        cfg.profiles = _profiles(doc["profiles"])
    if "card_modes" in doc:
        cfg.card_modes = parse_card_modes(doc["card_modes"])
    return cfg


def config_path(explicit: Optional[str] = None) -> Tuple[str, bool]:
    """The file to read and whether the user named it (then it must exist)."""
    if explicit:
        return explicit, True
    env = os.environ.get(ENV_VAR)
    if env:
        return env, True
    return DEFAULT_PATH, False


def _read(path: str) -> str:
    """The file's text: a regular file (a link to one is followed) of at most
    MAX_BYTES, in UTF-8."""
    try:
        return regularfile.decode_utf8(regularfile.read_bounded(path, MAX_BYTES), path)
    except FileNotFoundError:
        raise ConfigError(f"{path}: configuration file not found") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    except regularfile.NotRegular as e:
        raise ConfigError(f"{e}; a configuration must be a regular file: name the file "
                          "itself (a symbolic link to one is followed)") from None
    except regularfile.TooLarge as e:
        raise ConfigError(f"{e}; a configuration is a few KiB: name the configuration "
                          "file") from None
    except regularfile.NotText as e:
        raise ConfigError(str(e)) from None


def load(explicit: Optional[str] = None) -> Config:
    """Load the effective configuration: the named file, or the default file if present."""
    path, required = config_path(explicit)
    if not required and not os.path.exists(path):
        return Config()
    return parse_text(_read(path), path)


def parse_text(text: str, source: str) -> Config:
    return from_document(parse_document(text, source), source)


def parse_document(text: str, source: str) -> Any:
    from cdi import yamlin

    if text.startswith("\ufeff"):
        # YAML readers differ on a BOM (some take it as part of the first key):
        # the file is refused rather than read one way here, another elsewhere.
        raise ConfigError(f"{source}: the file starts with a byte-order mark (bytes EF BB BF), "
                          "which a configuration may not hold; save the file as UTF-8 "
                          "without a BOM")
    try:
        doc = yamlin.load(text)
    except yamlin.YamlError as e:
        raise ConfigError(f"{source}: {e}") from None
    if doc is not None and not isinstance(doc, dict):
        raise ConfigError(f"{source}: the configuration must be a mapping of keys, "
                          f"found {type(doc).__name__}")
    return doc


def check_file(path: str) -> Config:
    """Everything load() checks, and the structure once more with jsonschema
    itself; a bad file raises ConfigError with every problem found."""
    doc = parse_document(_read(path), path)
    import jsonschema

    found = problems(doc, path)
    for line in problems(doc, path, jsonschema.Draft7Validator(schema())):
        if line not in found:
            found.append(line)
    if found:
        raise ConfigError(found[0], found)
    return _built(doc or {}, path)
