"""Validates live spillway responses against the schemas of its own /openapi.json (jsonschema,
Draft 2020-12, which OpenAPI 3.1 schemas are).

Usage: check_schemas.py OPENAPI_FILE CASES_FILE
CASES_FILE is a JSON list of {"what", "pointer", "instance"}: `pointer` is a JSON pointer into the
document to the schema the instance must satisfy. Objects may carry no property the schema does not
declare (a client generated from the document would drop it): `unevaluatedProperties: false` is
added to every object schema with properties, except those used as parts of an `allOf`.
"""
import copy
import json
import sys

from jsonschema import Draft202012Validator

with open(sys.argv[1]) as f:
    doc = json.load(f)
with open(sys.argv[2]) as f:
    cases = json.load(f)

schemas = doc["components"]["schemas"]
in_all_of = set()


def walk(node, fn):
    if isinstance(node, dict):
        fn(node)
        for v in node.values():
            walk(v, fn)
    elif isinstance(node, list):
        for v in node:
            walk(v, fn)


def note_all_of(node):
    for part in node.get("allOf", []):
        ref = part.get("$ref", "")
        if ref.startswith("#/components/schemas/"):
            in_all_of.add(ref.rsplit("/", 1)[1])


walk(doc, note_all_of)
strict = copy.deepcopy(doc)


def close(node):
    if ("properties" in node or "allOf" in node) and "additionalProperties" not in node:
        node.setdefault("unevaluatedProperties", False)


def close_all(node, part_of_all_of=False):
    """Closes object schemas, but not the parts of an allOf (each sees only its own properties)."""
    if isinstance(node, dict):
        if not part_of_all_of:
            close(node)
        for k, v in node.items():
            if k == "allOf" and isinstance(v, list):
                for part in v:
                    close_all(part, True)
            else:
                close_all(v)
    elif isinstance(node, list):
        for v in node:
            close_all(v)


for name, schema in strict["components"]["schemas"].items():
    close_all(schema, name in in_all_of)
for path in strict["paths"].values():
    close_all(path)

failures = []
for case in cases:
    root = dict(strict)
    root["$ref"] = "#" + case["pointer"]
    validator = Draft202012Validator(root)
    errors = sorted(validator.iter_errors(case["instance"]), key=lambda e: list(e.path))
    for e in errors[:5]:
        failures.append(f"{case['what']}: at {'/'.join(map(str, e.path)) or '(root)'}: {e.message[:300]}")
if failures:
    print("\n".join(failures))
    sys.exit(f"{len(failures)} schema violations in {len(cases)} responses")
print(f"ok: {len(cases)} live responses match the document's schemas")
