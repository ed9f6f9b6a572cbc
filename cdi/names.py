"""Name rules of the CDI specification: vendor, class, kind and device names.

A fully qualified device name is ``vendor/class=name``; ``vendor/class`` is the
spec's kind. The rules are the specification's, checked character by character
so that an error can say which character broke which rule.
"""
from __future__ import annotations

from typing import Tuple


class CdiNameError(ValueError):
    """A name that breaks a CDI rule; the message names the value and the rule."""


def _is_letter(c: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z")


def _is_alnum(c: str) -> bool:
    return _is_letter(c) or ("0" <= c <= "9")


def _check(name: str, what: str, first_letter: bool, inner: str) -> None:
    if not name:
        raise CdiNameError(f"{what} name is empty")
    if first_letter and not _is_letter(name[0]):
        raise CdiNameError(f"{what} name {name!r} must start with a letter")
    if not first_letter and not _is_alnum(name[0]):
        raise CdiNameError(f"{what} name {name!r} must start with a letter or digit")
    for c in name[1:-1]:
        if not (_is_alnum(c) or c in inner):
            allowed = "letters, digits and " + " ".join(repr(x) for x in inner)
            raise CdiNameError(f"{what} name {name!r} has {c!r}; only {allowed} are allowed")
    if not _is_alnum(name[-1]):
        raise CdiNameError(f"{what} name {name!r} must end with a letter or digit")


def validate_vendor(vendor: str) -> None:
    _check(vendor, "vendor", True, "_-.")


def validate_class(cls: str) -> None:
    # Dots in a class are legal from cdiVersion 0.6.0; cdi.version accounts for that.
    _check(cls, "class", True, "_-.")


def validate_device_name(name: str) -> None:
    _check(name, "device", False, "_-.:")


def split_kind(kind: str) -> Tuple[str, str]:
    """Split ``vendor/class``; raise CdiNameError if it is not of that shape."""
    vendor, sep, cls = kind.partition("/")
    if not sep or not vendor or not cls:
        raise CdiNameError(f"kind {kind!r} must have the form vendor/class, e.g. gpuslice.io/gpu")
    return vendor, cls


def validate_kind(kind: str) -> None:
    vendor, cls = split_kind(kind)
    validate_vendor(vendor)
    validate_class(cls)


def parse_qualified(device: str) -> Tuple[str, str]:
    """Split ``vendor/class=name`` into (kind, name), checking every part."""
    kind, sep, name = device.partition("=")
    if not sep or not name:
        raise CdiNameError(
            f"device {device!r} is not fully qualified; expected vendor/class=name")
    validate_kind(kind)
    validate_device_name(name)
    return kind, name


def qualified(kind: str, name: str) -> str:
    return f"{kind}={name}"
