"""CDI spec validation: our schema, the rules a schema cannot say, and cdiVersion."""
import copy
import json
from pathlib import Path

import pytest

from cdi.schema import check_document
from cdi.spec import Spec, SpecError
from cdi.specfile import parse_spec
from cdi.version import minimum_version

OFFICIAL = Path(__file__).resolve().parents[2] / "shared" / "reference" / "cdi-schema"

BASE = {
    "cdiVersion": "0.5.0",
    "kind": "gpuslice.io/gpu",
    "devices": [
        {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
    ],
    "containerEdits": {
        "env": ["A=1"],
        "mounts": [{"hostPath": "/usr/lib/libcuda.so.1", "containerPath": "/usr/lib/libcuda.so.1",
                    "options": ["ro", "bind"]}],
        "hooks": [{"hookName": "poststop", "path": "/usr/bin/gpuslice-hook",
                   "args": ["gpuslice-hook", "release"]}],
    },
}


def check(doc):
    text = json.dumps(doc)
    return parse_spec(text, "t.json")


def mutated(fn):
    doc = copy.deepcopy(BASE)
    fn(doc)
    return doc


def test_base_is_valid():
    spec = check(BASE)
    assert spec.to_dict() == BASE


@pytest.mark.parametrize("mutate, rule", [
    (lambda d: d["devices"].append(copy.deepcopy(d["devices"][0])), "'0' appears twice"),
    (lambda d: d["devices"][0].update(containerEdits={}), "no container edits"),
    (lambda d: d["containerEdits"].update(env=["NOEQUALS"]), "NOEQUALS"),
    (lambda d: d["containerEdits"].update(env=["=x"]), "'=x'"),
    (lambda d: d["containerEdits"]["hooks"][0].update(hookName="afterStop"), "afterStop"),
    (lambda d: d["containerEdits"]["hooks"][0].update(path="relative/hook"), "relative/hook"),
    (lambda d: d["containerEdits"]["hooks"][0].update(env=["BAD"]), "BAD"),
    (lambda d: d.update(kind="gpuslice.io"), "vendor/class"),
    (lambda d: d.update(kind="1gpuslice.io/gpu"), "start with a letter"),
    (lambda d: d["devices"][0].update(name="-bad"), "-bad"),
    (lambda d: d["devices"][0].update(name="a/b"), "a/b"),
    (lambda d: d.update(cdiVersion="0.9.9"), "0.9.9"),
    (lambda d: d.update(cdiVersion="0.3.0"), "need at least 0.5.0"),
    (lambda d: d.update(devices=[]), "no devices"),
    (lambda d: d.pop("devices"), "devices"),
    (lambda d: d.update(extra=1), "extra"),
    (lambda d: d["devices"][0]["containerEdits"]["deviceNodes"][0].update(type="x"), "'x'"),
    (lambda d: d["devices"][0]["containerEdits"]["deviceNodes"][0].update(path="dev/x"), "dev/x"),
    (lambda d: d["devices"][0]["containerEdits"]["deviceNodes"][0].update(permissions="rwx"),
     "rwx"),
    (lambda d: d["containerEdits"]["mounts"][0].update(containerPath="lib"), "lib"),
    (lambda d: d["containerEdits"].update(additionalGids=[0]), "0"),
    (lambda d: d["devices"][0]["containerEdits"].update(env="A=1"), "A=1"),
])
def test_rule_refused_with_location(mutate, rule):
    with pytest.raises(SpecError) as e:
        check(mutated(mutate))
    assert rule in str(e.value)
    assert str(e.value).startswith("t.json: ")


def test_rules_checked_without_schema_too():
    """Spec.validate alone catches the semantic rules (for specs built in code)."""
    spec = Spec.from_dict(mutated(lambda d: d["devices"].append(copy.deepcopy(d["devices"][0]))))
    with pytest.raises(SpecError, match="appears twice"):
        spec.validate()


def spec_with(**edits):
    dev = {"name": "a", "containerEdits": {"env": ["A=1"]}}
    dev["containerEdits"].update(edits.pop("device_edits", {}))
    doc = {"cdiVersion": "0.3.0", "kind": "v.io/c", "devices": [dev]}
    doc.update(edits)
    return Spec.from_dict(doc)


@pytest.mark.parametrize("spec, version", [
    (spec_with(), "0.3.0"),
    (spec_with(device_edits={"mounts": [{"hostPath": "/a", "containerPath": "/a",
                                         "type": "bind"}]}), "0.4.0"),
    (spec_with(device_edits={"deviceNodes": [{"path": "/dev/x", "hostPath": "/h/x"}]}), "0.5.0"),
    (spec_with(annotations={"a": "b"}), "0.6.0"),
    (spec_with(kind="v.io/c.d"), "0.6.0"),
    (spec_with(device_edits={"additionalGids": [5]}), "0.7.0"),
    (spec_with(device_edits={"intelRdt": {"closID": "x"}}), "0.7.0"),
    (spec_with(device_edits={"netDevices": [{"hostInterfaceName": "e", "name": "f"}]}), "1.1.0"),
])
def test_minimum_version(spec, version):
    assert minimum_version(spec) == version


def test_device_name_starting_with_digit_needs_050():
    spec = spec_with()
    spec.devices[0].name = "0"
    assert minimum_version(spec) == "0.5.0"


def test_official_examples_pass_our_checks():
    for name in ("spec-example.json", "minimal.json"):
        doc = json.loads((OFFICIAL / name).read_text())
        check_document(doc)


def test_yaml_and_garbage():
    spec = parse_spec("cdiVersion: 0.5.0\nkind: a.io/b\ndevices:\n- name: x\n"
                      "  containerEdits:\n    env: [A=1]\n", "s.yaml")
    assert spec.devices[0].name == "x"
    with pytest.raises(SpecError, match="s.yaml: not valid YAML"):
        parse_spec("a: [", "s.yaml")
    with pytest.raises(SpecError, match="must be a mapping"):
        parse_spec("- 1\n", "s.yaml")
