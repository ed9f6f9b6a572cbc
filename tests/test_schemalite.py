"""cdi.schemalite agrees with jsonschema; cdi.yamlout round-trips through PyYAML."""
import copy
import json
import random

import jsonschema
import pytest
import yaml

from cdi import yamlout
from cdi.schemalite import UnsupportedSchema, Validator, first_problem
from ocihook.config import Config, schema

GOOD = Config().to_dict()

# Values that break each kind of rule the schema has, at every level.
BREAKERS = [None, True, 0, -1, 0.5, 20.0, "", "rel/path", "/abs", "binpack", "x", [], [1], {},
            {"name": "a"}, {"memory": "1g"}, {"name": "a", "memory": "1g", "extra": 1}]


def paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from paths(v, prefix + (i,))


def replaced(doc, path, value):
    doc = copy.deepcopy(doc)
    if not path:
        return value
    target = doc
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    return doc


def corpus():
    yield GOOD
    yield {"colour": "blue"}
    yield {"profiles": [{"name": "a", "memory": "1g", "cores": None}], "spare": 1}
    for path in paths(GOOD):
        for value in BREAKERS:
            yield replaced(GOOD, path, value)


def test_agrees_with_jsonschema_on_every_mutation():
    sch = schema()
    lite, full = Validator(sch), jsonschema.Draft7Validator(sch)
    checked = 0
    for doc in corpus():
        assert first_problem(lite, doc) == first_problem(full, doc), json.dumps(doc)[:300]
        checked += 1
    assert checked > 500


def test_agrees_on_random_documents():
    rng = random.Random(7)
    sch = schema()
    lite, full = Validator(sch), jsonschema.Draft7Validator(sch)
    keys = list(sch["properties"])
    for _ in range(2000):
        doc = {rng.choice(keys + ["bogus"]): rng.choice(BREAKERS) for _ in range(rng.randint(0, 4))}
        assert first_problem(lite, doc) == first_problem(full, doc), doc


def test_refuses_keywords_it_does_not_know():
    with pytest.raises(UnsupportedSchema, match="oneOf"):
        Validator({"type": "object", "properties": {"a": {"oneOf": []}}})


TRICKY = ["plain", "with: colon", "- dash", "#hash", "yes", "null", "0.5.0", "007", "é ü 𝄞",
          "tab\there", "new\nline", 'quote"s', "back\\slash", "", " lead", "trail ", "*star",
          "&amp", "!tag", "{brace}", "[bracket]", "%pct", "@at", "`tick`", "\x00\x1f"]


def test_yaml_round_trip():
    rng = random.Random(3)
    for _ in range(300):
        def value(depth=0):
            kind = rng.randrange(6 if depth < 4 else 3)
            if kind == 0:
                return rng.choice(TRICKY)
            if kind == 1:
                return rng.choice([0, -3, 1.5, True, False, None, 2 ** 40])
            if kind == 2:
                return rng.choice([[], {}])
            if kind in (3, 4):
                return {rng.choice(TRICKY + ["key", "true", "True", "NULL", "On", "1"]): value(depth + 1)
                        for _ in range(rng.randint(1, 3))}
            return [value(depth + 1) for _ in range(rng.randint(1, 3))]
        doc = value()
        assert yaml.safe_load(yamlout.dump(doc)) == doc, yamlout.dump(doc)
