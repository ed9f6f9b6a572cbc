"""The CDI spec model: a spec, its devices and their container edits.

Each type reads itself from the parsed document (``from_dict``), writes itself
back (``to_dict``, omitting empty fields as the reference library does) and
checks the rules a JSON schema cannot express (``validate``). Structural
checks (types, required keys) belong to cdi.schema; this module assumes a
document that passed them, but never crashes on one that did not.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from cdi import names

# CDI's hookName values, each also the name of its list in an OCI config's
# hooks (gpuslice-runtime, native/hook/runtime/apply.c, puts a hook in hooks[hookName]).
HOOK_NAMES = (
    "prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop",
)
DEVICE_TYPES = ("b", "c", "u", "p")


class SpecError(ValueError):
    """A spec that breaks a CDI rule; the message says where, the value and the rule."""


def _env_ok(where: str, env: List[str]) -> None:
    for entry in env:
        if "=" not in entry or entry.startswith("="):
            raise SpecError(f"{where}: env entry {entry!r} must have the form NAME=VALUE")


def _abs(where: str, what: str, path: str) -> None:
    if not path.startswith("/"):
        raise SpecError(f"{where}: {what} {path!r} must be an absolute path")


@dataclass
class DeviceNode:
    path: str
    host_path: str = ""
    type: str = ""
    major: Optional[int] = None
    minor: Optional[int] = None
    file_mode: Optional[int] = None
    permissions: str = ""
    uid: Optional[int] = None
    gid: Optional[int] = None

    _KEYS = (("path", "path"), ("host_path", "hostPath"), ("type", "type"),
             ("major", "major"), ("minor", "minor"), ("file_mode", "fileMode"),
             ("permissions", "permissions"), ("uid", "uid"), ("gid", "gid"))

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "DeviceNode":
        return cls(**{attr: d[key] for attr, key in cls._KEYS if key in d})

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for attr, key in self._KEYS:
            value = getattr(self, attr)
            if value not in ("", None):
                out[key] = value
        return out

    def validate(self, where: str) -> None:
        _abs(where, "device node path", self.path)
        if self.host_path:
            _abs(where, "device node hostPath", self.host_path)
        if self.type and self.type not in DEVICE_TYPES:
            raise SpecError(f"{where}: device node {self.path!r} type {self.type!r} "
                            f"must be one of {', '.join(DEVICE_TYPES)}")
        if self.permissions and (set(self.permissions) - set("rwm")):
            raise SpecError(f"{where}: device node {self.path!r} permissions "
                            f"{self.permissions!r} may hold only r, w and m")


@dataclass
class Mount:
    host_path: str
    container_path: str
    options: List[str] = field(default_factory=list)
    type: str = ""

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Mount":
        return cls(host_path=d.get("hostPath", ""), container_path=d.get("containerPath", ""),
                   options=list(d.get("options") or []), type=d.get("type", ""))

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"hostPath": self.host_path, "containerPath": self.container_path}
        if self.options:
            out["options"] = list(self.options)
        if self.type:
            out["type"] = self.type
        return out

    def validate(self, where: str) -> None:
        if not self.host_path:
            raise SpecError(f"{where}: mount to {self.container_path!r} has an empty hostPath")
        _abs(where, "mount containerPath", self.container_path)


@dataclass
class Hook:
    hook_name: str
    path: str
    args: List[str] = field(default_factory=list)
    env: List[str] = field(default_factory=list)
    timeout: Optional[int] = None

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Hook":
        return cls(hook_name=d.get("hookName", ""), path=d.get("path", ""),
                   args=list(d.get("args") or []), env=list(d.get("env") or []),
                   timeout=d.get("timeout"))

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"hookName": self.hook_name, "path": self.path}
        if self.args:
            out["args"] = list(self.args)
        if self.env:
            out["env"] = list(self.env)
        if self.timeout is not None:
            out["timeout"] = self.timeout
        return out

    def validate(self, where: str) -> None:
        if self.hook_name not in HOOK_NAMES:
            raise SpecError(f"{where}: hook name {self.hook_name!r} must be one of "
                            f"{', '.join(HOOK_NAMES)}")
        _abs(where, f"{self.hook_name} hook path", self.path)
        _env_ok(f"{where}: {self.hook_name} hook", self.env)
        if self.timeout is not None and self.timeout < 1:
            raise SpecError(f"{where}: {self.hook_name} hook timeout {self.timeout} "
                            "must be at least 1 second")


@dataclass
class ContainerEdits:
    env: List[str] = field(default_factory=list)
    device_nodes: List[DeviceNode] = field(default_factory=list)
    mounts: List[Mount] = field(default_factory=list)
    hooks: List[Hook] = field(default_factory=list)
    additional_gids: List[int] = field(default_factory=list)
    # Kept verbatim: we never generate them, but a foreign spec may carry them.
    intel_rdt: Optional[Dict[str, Any]] = None
    net_devices: List[Dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: Optional[Dict[str, Any]]) -> "ContainerEdits":
        d = d or {}
        return cls(
            env=list(d.get("env") or []),
            device_nodes=[DeviceNode.from_dict(x) for x in d.get("deviceNodes") or []],
            mounts=[Mount.from_dict(x) for x in d.get("mounts") or []],
            hooks=[Hook.from_dict(x) for x in d.get("hooks") or []],
            additional_gids=list(d.get("additionalGids") or []),
            intel_rdt=d.get("intelRdt"),
            net_devices=list(d.get("netDevices") or []),
        )

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [n.to_dict() for n in self.device_nodes]
        if self.mounts:
            out["mounts"] = [m.to_dict() for m in self.mounts]
        if self.hooks:
            out["hooks"] = [h.to_dict() for h in self.hooks]
        if self.additional_gids:
            out["additionalGids"] = list(self.additional_gids)
        if self.intel_rdt is not None:
            out["intelRdt"] = self.intel_rdt
        if self.net_devices:
            out["netDevices"] = list(self.net_devices)
        return out

    def is_empty(self) -> bool:
        return not self.to_dict()

    def validate(self, where: str) -> None:
        _env_ok(where, self.env)
        for node in self.device_nodes:
            node.validate(where)
        for mount in self.mounts:
            mount.validate(where)
        for hook in self.hooks:
            hook.validate(where)
        for gid in self.additional_gids:
            if gid == 0:
                raise SpecError(f"{where}: additionalGids may not hold 0 (root)")


@dataclass
class Device:
    name: str
    edits: ContainerEdits
    annotations: Dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Device":
        return cls(name=d.get("name", ""), edits=ContainerEdits.from_dict(d.get("containerEdits")),
                   annotations=dict(d.get("annotations") or {}))

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"name": self.name}
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        out["containerEdits"] = self.edits.to_dict()
        return out

    def validate(self, kind: str) -> None:
        try:
            names.validate_device_name(self.name)
        except names.CdiNameError as e:
            raise SpecError(f"{kind}: {e}") from None
        where = names.qualified(kind, self.name)
        if self.edits.is_empty():
            raise SpecError(f"{where}: device has no container edits; a device must change "
                            "the container (device nodes, env, mounts or hooks)")
        self.edits.validate(where)


@dataclass
class Spec:
    version: str
    kind: str
    devices: List[Device] = field(default_factory=list)
    edits: ContainerEdits = field(default_factory=ContainerEdits)
    annotations: Dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Spec":
        return cls(
            version=str(d.get("cdiVersion", "")),
            kind=str(d.get("kind", "")),
            devices=[Device.from_dict(x) for x in d.get("devices") or []],
            edits=ContainerEdits.from_dict(d.get("containerEdits")),
            annotations=dict(d.get("annotations") or {}),
        )

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"cdiVersion": self.version, "kind": self.kind}
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        out["devices"] = [dev.to_dict() for dev in self.devices]
        edits = self.edits.to_dict()
        if edits:
            out["containerEdits"] = edits
        return out

    def device(self, name: str) -> Optional[Device]:
        for dev in self.devices:
            if dev.name == name:
                return dev
        return None

    def validate(self) -> None:
        """Check what a schema cannot: names, duplicates, paths, hooks, the version."""
        # Imported here: cdi.version needs the model, the model needs the check.
        from cdi import version

        try:
            names.validate_kind(self.kind)
        except names.CdiNameError as e:
            raise SpecError(str(e)) from None
        version.check_declared(self)
        if not self.devices:
            raise SpecError(f"{self.kind}: the spec has no devices")
        seen = set()
        for dev in self.devices:
            if dev.name in seen:
                raise SpecError(f"{self.kind}: device name {dev.name!r} appears twice")
            seen.add(dev.name)
            dev.validate(self.kind)
        self.edits.validate(f"{self.kind} (spec-wide edits)")
