#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Schema suite for constrained decoding: starts mlxcel-server with the demo model, asks for each of
# the schemas below (response_format json_schema) with several seeds at temperature 0.9, and checks
# that every answer with finish_reason "stop" parses as JSON (no duplicate keys) and validates
# against its schema with the validator in this file (written from the JSON Schema spec, independent
# of the server's schema compiler). Each bounded schema must also finish ("stop") at least once. A few
# GBNF grammars (the `grammar` field) are checked the same way with Python regexes. Also: a bad
# schema and a bad grammar answer 400 naming the problem, and a grammar too ambiguous for the
# matcher's work limit, met a few tokens into the answer, ends it with an error (400; a stream sends
# the text so far, an error event and [DONE]), never with finish_reason "stop".
# usage: schema_suite.py PATH/TO/mlxcel-server
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'pylib'))
from live_server import DEMO, LiveServer  # noqa: E402

SEEDS = [1, 2, 3]

STR = {"type": "string", "maxLength": 24}
SCHEMAS = [
    {"type": "boolean"},
    {"type": "null"},
    {"type": "integer"},
    {"type": "number"},
    {"type": "string", "maxLength": 30},
    {"type": "string", "minLength": 3, "maxLength": 8},
    {"type": "integer", "minimum": 0, "maximum": 9},
    {"type": "integer", "minimum": -50, "maximum": 50},
    {"type": "integer", "minimum": 100, "maximum": 12345},
    {"type": "integer", "exclusiveMinimum": 5, "exclusiveMaximum": 17},
    {"type": "integer", "minimum": 1000},
    {"type": "integer", "maximum": -3},
    {"enum": ["red", "green", "blue"]},
    {"enum": [1, "two", None, True, {"a": 1}]},
    {"const": {"version": 2, "ok": True}},
    {"type": ["string", "null"], "maxLength": 10},
    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "maxItems": 5},
    {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 3},
    {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 1},
    {"type": "array", "maxItems": 0},
    {"type": "object", "properties": {"name": STR, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"]},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": STR},
     "required": ["b"]},
    {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}},
    {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 9}},
     "required": ["id"], "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 9}},
    {"type": "object", "additionalProperties": {"type": "boolean"}},
    {"type": "object", "properties": {"person": {"type": "object", "properties": {
        "first": STR, "last": STR, "address": {"type": "object", "properties": {
            "city": STR, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["city", "zip"]}},
        "required": ["first", "address"]}}, "required": ["person"]},
    {"type": "object", "properties": {"items": {"type": "array", "maxItems": 3, "items": {
        "type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
                                         "qty": {"type": "integer", "minimum": 1, "maximum": 10}},
        "required": ["sku", "qty"]}}}, "required": ["items"]},
    {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 5}, {"type": "string", "maxLength": 5}, {"type": "null"}]},
    {"oneOf": [{"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "integer", "minimum": 1,
                                                                                     "maximum": 9}},
                "required": ["kind", "r"]},
               {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "integer", "minimum": 1,
                                                                                        "maximum": 9}},
                "required": ["kind", "side"]}]},
    {"type": "object", "properties": {"when": {"type": "string", "format": "date"},
                                      "at": {"type": "string", "format": "time"}}, "required": ["when", "at"]},
    {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}}, "required": ["id"]},
    {"type": "object", "properties": {"ts": {"type": "string", "format": "date-time"}}, "required": ["ts"]},
    {"type": "string", "pattern": "^(yes|no|maybe)$"},
    {"type": "string", "pattern": "ab+c"},
    {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer", "minimum": 0, "maximum": 9},
        "kids": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
     "$ref": "#/$defs/node"},
    {"definitions": {"color": {"enum": ["r", "g"]}}, "type": "object",
     "properties": {"fg": {"$ref": "#/definitions/color"}, "bg": {"$ref": "#/definitions/color"}},
     "required": ["fg", "bg"], "additionalProperties": False},
    {"type": "object", "title": "annotated", "description": "annotations are ignored",
     "properties": {"q": {"type": "string", "maxLength": 12, "description": "a question", "examples": ["why?"]}},
     "required": ["q"]},
    {"allOf": [{"type": "array", "items": {"type": "string", "maxLength": 4}, "minItems": 1, "maxItems": 4}]},
    {"type": "object", "properties": {"matrix": {"type": "array", "minItems": 2, "maxItems": 2, "items": {
        "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer", "minimum": -9, "maximum": 9}}}},
     "required": ["matrix"]},
]
# Schemas with unbounded content: the demo model may write past max_tokens, so only the validity of
# the answers that do stop is required.
OPEN_SCHEMAS = [{}, {"type": "object"}, {"type": "string"}, {"type": "array"}]


class Invalid(Exception):
    pass


def resolve(root, ref):
    if ref == "#":
        return root
    parts = ref[2:].split("/")
    node = root
    for p in parts:
        node = node[p]
    return node


FORMATS = {
    "date": r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])",
    "time": r"([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)",
    "uuid": r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
}
FORMATS["date-time"] = FORMATS["date"] + "T" + FORMATS["time"]


def type_ok(v, t):
    if t == "null":
        return v is None
    if t == "boolean":
        return isinstance(v, bool)
    if t == "integer":
        return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if t == "string":
        return isinstance(v, str)
    if t == "array":
        return isinstance(v, list)
    if t == "object":
        return isinstance(v, dict)
    raise Invalid("unknown type " + t)


def matches(v, s, root):
    try:
        validate(v, s, root)
        return True
    except Invalid:
        return False


def validate(v, s, root):
    if s is True or s == {}:
        return
    if "$ref" in s:
        return validate(v, resolve(root, s["$ref"]), root)
    if "const" in s and v != s["const"] or (type(v) is bool) != (type(s.get("const", v)) is bool):
        raise Invalid("const")
    if "enum" in s and not any(v == e and (type(v) is bool) == (type(e) is bool) for e in s["enum"]):
        raise Invalid("enum")
    if "anyOf" in s and not any(matches(v, a, root) for a in s["anyOf"]):
        raise Invalid("anyOf")
    if "oneOf" in s and sum(matches(v, a, root) for a in s["oneOf"]) != 1:
        raise Invalid("oneOf")
    for a in s.get("allOf", []):
        validate(v, a, root)
    t = s.get("type")
    if t is not None:
        ts = t if isinstance(t, list) else [t]
        if not any(type_ok(v, x) for x in ts):
            raise Invalid("type %s for %r" % (t, v))
    if isinstance(v, str):
        if len(v) < s.get("minLength", 0) or len(v) > s.get("maxLength", 1 << 30):
            raise Invalid("length")
        if "pattern" in s and not re.search(s["pattern"], v):
            raise Invalid("pattern")
        if "format" in s and not re.fullmatch(FORMATS[s["format"]], v):
            raise Invalid("format")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if "minimum" in s and v < s["minimum"] or "maximum" in s and v > s["maximum"]:
            raise Invalid("range")
        if "exclusiveMinimum" in s and v <= s["exclusiveMinimum"]:
            raise Invalid("exclusiveMinimum")
        if "exclusiveMaximum" in s and v >= s["exclusiveMaximum"]:
            raise Invalid("exclusiveMaximum")
    if isinstance(v, list):
        if len(v) < s.get("minItems", 0) or len(v) > s.get("maxItems", 1 << 30):
            raise Invalid("items count")
        if "items" in s:
            for x in v:
                validate(x, s["items"], root)
    if isinstance(v, dict):
        props = s.get("properties", {})
        for r in s.get("required", []):
            if r not in v:
                raise Invalid("required " + r)
        for k, x in v.items():
            if k in props:
                validate(x, props[k], root)
            else:
                ap = s.get("additionalProperties", True)
                if ap is False:
                    raise Invalid("additional property " + k)
                if isinstance(ap, dict):
                    validate(x, ap, root)


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise Invalid("duplicate key")
    return dict(pairs)


GRAMMARS = [
    ('root ::= "(" [0-9]{1,3} ( "," [0-9]{1,3} )* ")"', r"\(\d{1,3}(,\d{1,3})*\)"),
    ('root ::= word ( " " word ){0,4} "."\nword ::= [a-z]{1,8}', r"[a-z]{1,8}( [a-z]{1,8}){0,4}\."),
    ('root ::= ( "yes" | "no" ) "!"?', r"(yes|no)!?"),
]


def main():
    srv = LiveServer([sys.argv[1], "-m", DEMO, "--parallel", "4", "--ctx", "1024"])

    def post(body):
        return srv.post("/v1/completions", body)

    failures = 0
    stops = 0
    try:
        for i, schema in enumerate(SCHEMAS + OPEN_SCHEMAS):
            finished = 0
            for seed in SEEDS:
                status, resp = post({"prompt": "JSON:", "max_tokens": 300, "temperature": 0.9, "seed": seed,
                                          "response_format": {"type": "json_schema",
                                                              "json_schema": {"name": "s", "schema": schema}}})
                if status != 200:
                    failures += 1
                    print("FAIL schema %d seed %d: HTTP %d %s" % (i, seed, status, resp))
                    continue
                choice = resp["choices"][0]
                if choice["finish_reason"] != "stop":
                    continue
                finished += 1
                text = choice["text"]
                try:
                    doc = json.loads(text, object_pairs_hook=no_duplicates)
                    validate(doc, schema, schema)
                except (ValueError, Invalid) as e:
                    failures += 1
                    print("FAIL schema %d seed %d: %s\n  schema: %s\n  output: %r" % (i, seed, e, json.dumps(schema),
                                                                                       text))
            stops += finished
            if finished == 0 and i < len(SCHEMAS):
                failures += 1
                print("FAIL schema %d: no seed finished with stop: %s" % (i, json.dumps(schema)))
        for g, rx in GRAMMARS:
            for seed in SEEDS:
                status, resp = post({"prompt": "Answer:", "max_tokens": 100, "temperature": 0.9, "seed": seed,
                                          "grammar": g})
                choice = resp.get("choices", [{}])[0]
                if status != 200 or (choice["finish_reason"] == "stop" and not re.fullmatch(rx, choice["text"])):
                    failures += 1
                    print("FAIL grammar %r seed %d: %s" % (g, seed, resp))
        status, resp = post({"prompt": "x", "grammar": 'root ::= "a" b'})
        if status != 400 or "line 1, column 14: rule 'b' is used but not defined" not in resp["error"]["message"]:
            failures += 1
            print("FAIL bad grammar: %d %s" % (status, resp))
        # Two hundred nullable repetitions in a row after "Hello": the masks inside them pass the
        # matcher's work limit.
        ambiguous = 'root ::= "Hello" ' + " ".join("[0-9]*" if i % 2 == 0 else "[a-z]*" for i in range(200)) + ' "x"'
        body = {"prompt": "Say hello", "max_tokens": 20, "temperature": 0, "grammar": ambiguous}
        status, resp = post(body)
        if status != 400 or "work limit" not in resp["error"]["message"]:
            failures += 1
            print("FAIL over-ambiguous grammar: %d %s" % (status, resp))
        events = srv.stream("/v1/completions", body)
        text = "".join(e["choices"][0]["text"] for e in events if e.get("choices"))
        finishes = [e["choices"][0]["finish_reason"] for e in events if e.get("choices")]
        if (not events or "work limit" not in events[-1].get("error", {}).get("message", "")
                or not text.startswith("Hello") or any(finishes)):
            failures += 1
            print("FAIL over-ambiguous grammar, streamed: %s" % events)
        status, resp = post({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {
            "schema": {"type": "object", "properties": {"a": {"type": "string", "format": "email"}}}}}})
        if status != 400 or "#/properties/a" not in resp["error"]["message"]:
            failures += 1
            print("FAIL bad schema: %d %s" % (status, resp))
    finally:
        srv.stop()
    print("%d schemas x %d seeds: %d finished with stop and validated; %d failures" % (
        len(SCHEMAS) + len(OPEN_SCHEMAS), len(SEEDS), stops, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
