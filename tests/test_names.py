"""CDI name rules and gpuslice's profile-name rule."""
import pytest

from cdi import names
from cdi.profiles import ProfileError, validate_profile_name


@pytest.mark.parametrize("kind", ["gpuslice.io/gpu", "vendor.com/class-1", "a/b", "nvidia.com/gpu"])
def test_good_kinds(kind):
    names.validate_kind(kind)


@pytest.mark.parametrize("kind, rule", [
    ("gpu", "vendor/class"), ("/gpu", "vendor/class"), ("gpuslice.io/", "vendor/class"),
    ("1vendor/gpu", "start with a letter"), ("vendor-/gpu", "end with a letter or digit"),
    ("ven dor/gpu", "' '"), ("vendor/g+u", "'+'"), ("vendor/_gpu", "start with a letter"),
])
def test_bad_kinds(kind, rule):
    with pytest.raises(names.CdiNameError) as e:
        names.validate_kind(kind)
    assert rule in str(e.value)


@pytest.mark.parametrize("name", ["0", "all", "GPU-1a2b", "0-4g-30", "a:b", "x.y", "7"])
def test_good_device_names(name):
    names.validate_device_name(name)


@pytest.mark.parametrize("name, rule", [
    ("", "empty"), ("-0", "start with a letter or digit"), ("0-", "end with a letter or digit"),
    ("a/b", "'/'"), ("a=b", "'='"), ("a b", "' '"),
])
def test_bad_device_names(name, rule):
    with pytest.raises(names.CdiNameError) as e:
        names.validate_device_name(name)
    assert rule in str(e.value)


def test_parse_qualified():
    assert names.parse_qualified("gpuslice.io/gpu=0-4g") == ("gpuslice.io/gpu", "0-4g")
    for bad in ("gpuslice.io/gpu", "gpuslice.io/gpu=", "gpu=0", "gpuslice.io/gpu=-x"):
        with pytest.raises(names.CdiNameError):
            names.parse_qualified(bad)


@pytest.mark.parametrize("name", ["4g", "4g-30", "small", "x1-2-3", "16g"])
def test_good_profile_names(name):
    validate_profile_name(name)


@pytest.mark.parametrize("name, rule", [
    ("0-4g", "letter before its first '-'"), ("12", "letter before"), ("all", "reserved"),
    ("gpu-x", "reserved"), ("4G", "lowercase"), ("4g--1", "single '-'"), ("", "lowercase"),
    ("4g_30", "lowercase"),
])
def test_bad_profile_names(name, rule):
    with pytest.raises(ProfileError) as e:
        validate_profile_name(name)
    assert rule in str(e.value)
