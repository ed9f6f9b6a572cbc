"""The plugin's configuration block in the Nomad client's configuration:

    plugin "gpuslice-nomad-device" {
      config {
        config             = "/etc/gpuslice/config.yaml"  # "" : GPUSLICE_CONFIG or that file
        fingerprint_period = "5s"   # how often the offers are recomputed
        claim_timeout      = "5m"   # a reservation no container took over is given back then
      }
    }

Nomad decodes the block by the schema the plugin gives (``schema``: Nomad's
hclspec, defaults included) and sends the value msgpack-encoded (go-cty's
encoding: a map of the attributes) to SetConfig; ``parse`` checks it. Every
problem is one line naming the key, the value and the rule.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Optional

import msgpack

from ocihook import config as gsconfig
from ocihook.nomad.proto import hcl_spec_pb2 as hclspec


class SettingsError(ValueError):
    """A configuration block that cannot be used; one line."""


# key -> (default, the HCL type)
DEFAULTS: Dict[str, str] = {"config": "", "fingerprint_period": "5s", "claim_timeout": "5m"}
# Bounds, in seconds: a period below 100 ms would make the plugin a busy
# reader of the accountant; a claim should outlive an image pull (the
# default is 5m), but a test needs a short one.
BOUNDS = {"fingerprint_period": (0.1, 3600.0), "claim_timeout": (1.0, 86400.0)}

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
MAX_DURATION_CHARS = 32  # 1h0m0.000000001s is 16
_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")


@dataclass(frozen=True)
class Settings:
    config_path: Optional[str]  # None: GPUSLICE_CONFIG or /etc/gpuslice/config.yaml
    fingerprint_period: float   # seconds
    claim_timeout: float        # seconds
    gpuslice: gsconfig.Config


def schema() -> hclspec.Spec:
    """ConfigSchema's answer: an object of string attributes, each with its default."""
    obj = hclspec.Object()
    for key, default in DEFAULTS.items():
        obj.attributes[key].CopyFrom(hclspec.Spec(default=hclspec.Default(
            primary=hclspec.Spec(Attr=hclspec.Attr(name=key, type="string")),
            default=hclspec.Spec(literal=hclspec.Literal(value=f'"{default}"')))))
    return hclspec.Spec(object=obj)


def parse_duration(key: str, value: object) -> float:
    """Go's duration text (5s, 1m30s, 500ms) in seconds, within BOUNDS[key]."""
    low, high = BOUNDS[key]
    rule = (f"plugin config {key} {value!r} is not a duration from {low:g}s to {high:g}s "
            "(Go's form: 500ms, 5s, 1m30s)")
    # Bounded first: _PART backtracks over a long run of digits (quadratic: a
    # setting of a million digits held the plugin for minutes).
    if not isinstance(value, str) or not value or len(value) > MAX_DURATION_CHARS or \
            _PART.sub("", value) != "":
        raise SettingsError(rule)
    seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(value))
    if not low <= seconds <= high:
        raise SettingsError(rule)
    return seconds


def decode(raw: bytes) -> Dict[str, Any]:
    """The block's value from msgpack: a map of attribute names; empty bytes (no
    block at all) is every default."""
    if not raw:
        return dict(DEFAULTS)
    try:
        value = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
        shown = raw[:16].hex() + ("..." if len(raw) > 16 else "")
        raise SettingsError(f"plugin config {shown} ({len(raw)} bytes) is not MessagePack ({e}); "
                            "a Nomad client sends the plugin's config block so encoded") from None
    if not isinstance(value, dict):
        raise SettingsError(f"plugin config is a {type(value).__name__}, not a map of "
                            f"attributes ({', '.join(DEFAULTS)})")
    return value


def parse(raw: bytes) -> Settings:
    """Check the block (every key known, of its type and range) and load the
    gpuslice configuration it names."""
    doc = decode(raw)
    unknown = sorted(str(k) for k in doc if k not in DEFAULTS)
    if unknown:
        raise SettingsError(f"plugin config has {', '.join(map(repr, unknown))}, which "
                            f"gpuslice-nomad-device does not know; it knows {', '.join(DEFAULTS)}")
    values = {k: doc.get(k, d) for k, d in DEFAULTS.items()}
    if values["config"] is None:  # null: the attribute left out
        values["config"] = ""
    if not isinstance(values["config"], str) or "\0" in values["config"]:
        raise SettingsError(f"plugin config config {values['config']!r} is not a path: name "
                            "the gpuslice configuration file, or \"\" for GPUSLICE_CONFIG or "
                            "/etc/gpuslice/config.yaml")
    period = parse_duration("fingerprint_period", values["fingerprint_period"])
    timeout = parse_duration("claim_timeout", values["claim_timeout"])
    path = values["config"] or None
    try:
        loaded = gsconfig.load(path)
    except gsconfig.ConfigError as e:
        raise SettingsError(str(e)) from None
    return Settings(path, period, timeout, loaded)


def defaults() -> Settings:
    """What the plugin uses before SetConfig (Nomad always calls it first)."""
    return parse(b"")
