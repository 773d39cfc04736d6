"""What the caller asks for -> an llguidance grammar (a string llguidance.LLMatcher compiles).

Three requests, exactly one at a time:
  json_schema=<dict or JSON text>   text that validates against the schema
  json_schema=True                  any JSON object (ANY_JSON_OBJECT; OpenAI's "json_object")
  grammar=<Lark text>               llguidance's Lark dialect (https://github.com/guidance-ai/llguidance)
(A schema a request states may be JSON Schema's `true` or `false` instead: `from_standard_schema`
turns it into what json_schema= takes.)

JSON is bounded so that a small model can finish (left free, small models wander in whitespace,
digits or invented keys and never close the object; docs/STRUCTURED_OUTPUT.md has the figures):
  * compact: no whitespace between tokens, separators "," and ":" (whitespace inside strings is
    text and stays allowed);
  * closed objects: an object schema that lists `properties` but says nothing of
    `additionalProperties` / `patternProperties` gets `additionalProperties: false` (llama.cpp's
    default too). JSON Schema would allow any extra key, and small models take that licence and
    invent keys until max_tokens; the text still validates against the schema as given;
  * numbers: llguidance has no digit-count option, so number and integer schemas without a bound
    get one: |value| < 10**MAX_INT_DIGITS (at most that many integer digits), and numbers without
    a `multipleOf` get `multipleOf: 10**-MAX_FRACTION_DIGITS` (at most that many fraction digits,
    no exponent). Bounds the schema states itself are kept, but one further out than the digit
    bound (minimum: -1e30) gives way to it where the bound on the other side allows that: it
    would only let the model write more digits, and llguidance compiles no bound past about 1e18.
    Integers beyond 64 bits anywhere in a schema are refused: llguidance cannot read them.
  * recursion: a schema that refers to itself (a tree through `$ref`) is unrolled to at most
    MAX_RECURSION_DEPTH nested uses of each recursive definition; deeper, the reference allows
    nothing (`false`), so an optional child can no longer open. Left free, small models nest
    A -> B -> C -> ... until max_tokens.
  * times: `format` time and date-time allow any number of digits after the seconds' point, and
    small models write them on and on; without a maxLength they get one that leaves nine
    (TIME_MAX_LENGTH: "HH:MM:SS.fffffffff+HH:MM"; the date and "T" before it for date-time). Values a schema leaves untyped
    (`{}`, `additionalProperties: true`) are llguidance's free JSON and stay unbounded.
Schema features llguidance cannot enforce are errors, never silently dropped (lenient stays off).
Two that llguidance 1.9 leaves out are rewritten or enforced here:
  * `propertyNames` becomes what it means for the keys: with `enum` / `const`, those names as
    `properties` (each with the schema a key of that name had); with a `pattern` or length
    bounds, a `patternProperties` entry holding what `additionalProperties` allowed; the object
    is then closed. Listed properties whose names it forbids are dropped (an error if required).
    (A listed property whose name matches the pattern must then fit additionalProperties' schema
    too: stricter than JSON Schema, so the text still validates.)
  * `uniqueItems: true` is taken out of the grammar and enforced in the decoding loop
    (unique.py), for JSON Schema requests; tool arguments, which sit inside a larger grammar,
    refuse it. `uniqueItems: false`, and true where `maxItems` <= 1, mean nothing and are dropped.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

import llguidance

MAX_INT_DIGITS = 12
MAX_FRACTION_DIGITS = 6
TIME_MAX_LENGTH = {"time": 24, "date-time": 35}
MAX_RECURSION_DEPTH = 6

# Options llguidance's JSON compiler takes (JsonCompileOptions): compact JSON.
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}

# Any JSON value (JSON Schema's `true`), spelled out so that the number bounds reach it.
ANY_JSON_VALUE: dict[str, Any] = {
    "$ref": "#/$defs/value",
    "$defs": {"value": {"anyOf": [
        {"type": "null"}, {"type": "boolean"}, {"type": "number"}, {"type": "string"},
        {"type": "array", "items": {"$ref": "#/$defs/value"}},
        {"type": "object", "additionalProperties": {"$ref": "#/$defs/value"}},
    ]}},
}
# Any JSON object, its values any JSON value.
ANY_JSON_OBJECT: dict[str, Any] = {
    "type": "object",
    "additionalProperties": {"$ref": "#/$defs/value"},
    "$defs": ANY_JSON_VALUE["$defs"],
}
# The integers llguidance reads in a schema (i64 and u64).
LLGUIDANCE_INTEGERS = range(-2 ** 63, 2 ** 64)

# Keywords whose values are JSON data, not subschemas: the bounds walk does not enter them.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples", "x-guidance"})
_LOWER_KEYS = ("minimum", "exclusiveMinimum")
_UPPER_KEYS = ("maximum", "exclusiveMaximum")


# What propertyNames may say and still be rewritten (keys are strings whatever it says of type).
_PROPERTY_NAME_KEYS = frozenset({"type", "pattern", "enum", "const", "minLength", "maxLength"})


def _name_filter(names: dict[str, Any]) -> tuple[str | None, list[str] | None]:
    """propertyNames -> (one regex every allowed key matches, or None: any key) and (the allowed
    keys when it lists them, else None). ValueError for what cannot be rewritten."""
    unknown = sorted(set(names) - _PROPERTY_NAME_KEYS)
    if unknown:
        raise ValueError(f"propertyNames: only {', '.join(sorted(_PROPERTY_NAME_KEYS - {'type'}))} can be "
                         f"enforced; this schema uses {', '.join(repr(k) for k in unknown)}")
    if names.get("type", "string") not in ("string", ["string"]):
        raise ValueError("propertyNames: object keys are strings, so a type other than \"string\" allows none")
    lo, hi = names.get("minLength"), names.get("maxLength")
    pattern = names.get("pattern")
    if (lo is not None or hi is not None) and pattern is not None:
        raise ValueError("propertyNames: a pattern and length bounds together cannot be enforced; "
                         "put the length into the pattern")
    if lo is not None or hi is not None:
        pattern = f"^.{{{int(lo or 0)},{'' if hi is None else int(hi)}}}$"
    listed = None
    if "const" in names or "enum" in names:
        listed = [names["const"]] if "const" in names else list(names["enum"])
        if "const" in names and "enum" in names:
            listed = [n for n in listed if n in names["enum"]]
        listed = [n for n in listed if isinstance(n, str) and (pattern is None or re.search(pattern, n))]
    return pattern, listed


def _rewrite_property_names(out: dict[str, Any]) -> None:
    """Replaces out["propertyNames"] by properties / patternProperties (see the module doc)."""
    names = out.pop("propertyNames")
    if names is True or names == {}:
        return
    required = [r for r in out.get("required", []) if isinstance(r, str)]
    properties = dict(out.get("properties", {}))
    patterns = dict(out.get("patternProperties", {}))
    extra = out.get("additionalProperties", True)   # the schema of a key nothing else names
    if names is False:
        pattern, listed = None, []
    elif isinstance(names, dict):
        pattern, listed = _name_filter(names)
    else:
        raise ValueError("propertyNames must be a schema (an object or a boolean)")

    def allowed(name: str) -> bool:
        return name in listed if listed is not None else pattern is None or re.search(pattern, name) is not None

    forbidden = [r for r in required if not allowed(r)]
    if forbidden:
        raise ValueError(f"propertyNames forbids the required property {forbidden[0]!r}: no object fits the schema")
    properties = {k: v for k, v in properties.items() if allowed(k)}
    if listed is not None:
        for name in listed:
            if name in properties:
                continue
            matching = [v for p, v in patterns.items() if re.search(p, name)]
            if matching:
                properties[name] = matching[0] if len(matching) == 1 else {"allOf": matching}
            elif extra is not False:
                properties[name] = {} if extra is True else extra
        patterns = {}
    elif pattern is not None and extra is not False:
        if patterns:
            raise ValueError("propertyNames with a pattern cannot be enforced together with patternProperties")
        patterns = {pattern: {} if extra is True else extra}
    out["properties"] = properties
    if patterns:
        out["patternProperties"] = patterns
    else:
        out.pop("patternProperties", None)
    out["additionalProperties"] = False


def _distinct_values(items: Any) -> int | None:
    """How many distinct values an item schema allows, when it is a small finite set."""
    if not isinstance(items, dict):
        return None
    if "const" in items:
        return 1
    if isinstance(items.get("enum"), list):
        return len({json.dumps(v, sort_keys=True) for v in items["enum"]})
    return {"boolean": 2, "null": 1}.get(items.get("type")) if isinstance(items.get("type"), str) else None


def _has_unique_items(node: dict[str, Any]) -> bool:
    """Whether `node` asks for uniqueItems in a way that constrains anything; ValueError when
    its items cannot be as many as minItems asks."""
    max_items = node.get("maxItems")
    if node.get("uniqueItems") is not True or (isinstance(max_items, int) and max_items <= 1):
        return False
    n = _distinct_values(node.get("items"))
    min_items = node.get("minItems")
    if n is not None and isinstance(min_items, int) and min_items > n:
        raise ValueError(f"uniqueItems with minItems {min_items}: the items allow only {n} distinct values")
    return True


def _bound(node: Any, unique: list[bool]) -> Any:
    """A copy of schema `node` with closed objects and digit bounds, propertyNames rewritten and
    uniqueItems taken out (see the module doc); unique[0] is set when a uniqueItems was."""
    if isinstance(node, list):
        return [_bound(item, unique) for item in node]
    if not isinstance(node, dict):
        return node
    # propertyNames is rewritten as it was written (bounds meant for values would only hide it)
    out = {k: (v if k in _DATA_KEYWORDS or k == "propertyNames" else _bound(v, unique)) for k, v in node.items()}
    if "uniqueItems" in out:
        unique[0] = unique[0] or _has_unique_items(out)
        del out["uniqueItems"]
    if "propertyNames" in out:
        _rewrite_property_names(out)
    if "properties" in out and "additionalProperties" not in out and "patternProperties" not in out:
        out["additionalProperties"] = False
    if out.get("format") in TIME_MAX_LENGTH and "maxLength" not in out:
        out["maxLength"] = TIME_MAX_LENGTH[out["format"]]
    types = out.get("type")
    types = set(types) if isinstance(types, list) else {types}
    if not types & {"number", "integer"}:
        return out
    limit = 10 ** MAX_INT_DIGITS
    lower = max((out[k] for k in _LOWER_KEYS if _is_number(out.get(k))), default=None)
    upper = min((out[k] for k in _UPPER_KEYS if _is_number(out.get(k))), default=None)
    # The digit bound stands in for a missing bound or a looser one, unless it would contradict
    # the schema's own bound on the other side.
    if (lower is None or lower < -limit) and (upper is None or upper > -limit):
        for key in _LOWER_KEYS:
            out.pop(key, None)
        out["exclusiveMinimum"] = -limit
    if (upper is None or upper > limit) and (lower is None or lower < limit):
        for key in _UPPER_KEYS:
            out.pop(key, None)
        out["exclusiveMaximum"] = limit
    if "number" in types and "multipleOf" not in out:
        out["multipleOf"] = 10.0 ** -MAX_FRACTION_DIGITS
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_integers(schema: Any) -> None:
    """ValueError for an integer anywhere in `schema` that llguidance cannot read."""
    todo = [schema]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
        elif isinstance(node, int) and node not in LLGUIDANCE_INTEGERS:
            text = str(node)
            shown = text if len(text) <= 24 else f"{text[:20]}... ({len(text.lstrip('-'))} digits)"
            raise ValueError(f"the schema holds the integer {shown}, which cannot be enforced: "
                             "integers in a schema must fit in 64 bits")


_DEFS_KEYS = ("$defs", "definitions")
_ROOT = "#"


def _refs_in(node: Any) -> set[str]:
    """Every $ref string inside `node` (data keywords skipped)."""
    found: set[str] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, list):
            todo.extend(n)
        elif isinstance(n, dict):
            if isinstance(n.get("$ref"), str):
                found.add(n["$ref"])
            todo.extend(v for k, v in n.items() if k not in _DATA_KEYWORDS and k not in _DEFS_KEYS)
    return found


def _bound_recursion(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its recursive definitions unrolled to MAX_RECURSION_DEPTH (see the module doc).
    Copy k of definition X refers to copy k + 1 of each recursive definition; the last copy's
    references are `false`."""
    bodies: dict[str, Any] = {_ROOT: {k: v for k, v in schema.items() if k not in _DEFS_KEYS}}
    for key in _DEFS_KEYS:
        for name, body in (schema.get(key) or {}).items() if isinstance(schema.get(key), dict) else ():
            bodies[f"#/{key}/{name}"] = body
    edges = {ref: {r for r in _refs_in(body) if r in bodies} for ref, body in bodies.items()}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), list(edges[start])
        while todo:
            r = todo.pop()
            if r == goal:
                return True
            if r not in seen:
                seen.add(r)
                todo.extend(edges[r])
        return False

    recursive = [ref for ref in bodies if reaches(ref, ref)]
    if not recursive:
        return schema
    names = {ref: f"edgeinfer_depth_{i}" for i, ref in enumerate(recursive)}

    def retarget(node: Any, depth: int) -> Any:
        if isinstance(node, list):
            return [retarget(n, depth) for n in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        out = {k: (v if k in _DATA_KEYWORDS or k in _DEFS_KEYS else retarget(v, depth)) for k, v in node.items()}
        if ref in names:
            if depth >= MAX_RECURSION_DEPTH:
                return False
            out["$ref"] = f"#/$defs/{names[ref]}_{depth}"
        return out

    out = retarget(bodies[_ROOT], 0)
    for key in _DEFS_KEYS:   # definitions that are not recursive keep their place for their refs
        if isinstance(schema.get(key), dict):
            out[key] = {n: b for n, b in schema[key].items() if f"#/{key}/{n}" not in names}
    copies = {f"{name}_{depth}": retarget(bodies[ref], depth + 1)
              for ref, name in names.items() for depth in range(MAX_RECURSION_DEPTH)}
    out["$defs"] = {**out.get("$defs", {}), **copies}
    return out


@dataclass(frozen=True)
class Grammar:
    """An llguidance grammar, and the JSON schema whose uniqueItems the loop enforces (or None)."""
    text: str
    unique_items_schema: Mapping[str, Any] | None = None


def _bounded(schema: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """`schema` with the bounds above, and whether it asked for uniqueItems. ValueError for what
    llguidance could not read."""
    unique = [False]
    out = _bound(_bound_recursion(dict(schema)), unique)
    _check_integers(out)
    return out, unique[0]


def bounded_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` with the bounds above (closed objects, digit limits), for grammars built
    around schemas elsewhere (tool-call arguments). ValueError if it asks for uniqueItems,
    which only a whole-answer schema can have enforced."""
    out, unique = _bounded(schema)
    if unique:
        raise ValueError("uniqueItems is enforced for response_format schemas, not inside tool arguments")
    return out


def json_schema_grammar(schema: Mapping[str, Any] | str | bool) -> Grammar:
    """The grammar for `schema` (a dict, its JSON text, or True for any JSON object).
    ValueError if it is not a JSON object or asks for what cannot be enforced; other schema
    errors show when the grammar is compiled. JSON text is read as JSON Schema reads it: the text
    `true` (a --json-schema file, say) allows any JSON value, `false` none (from_standard_schema)."""
    if schema is True:
        schema = ANY_JSON_OBJECT
    elif isinstance(schema, str):
        try:
            schema = from_standard_schema(json.loads(schema))
        except json.JSONDecodeError as e:
            raise ValueError(f"json_schema is not valid JSON: {e}") from None
    if not isinstance(schema, Mapping):
        raise ValueError(f"json_schema must be a JSON object (a dict), or True for any JSON object; "
                         f"got {type(schema).__name__}")
    bounded, unique = _bounded(schema)
    text = llguidance.LLMatcher.grammar_from_json_schema(bounded, defaults=JSON_OPTIONS)
    return Grammar(text, dict(schema) if unique else None)


def from_standard_schema(schema: Mapping[str, Any] | bool) -> Mapping[str, Any]:
    """A schema as JSON Schema reads it -> json_schema_grammar's argument (whose True means any
    JSON object). JSON Schema's `true` allows any JSON value (ANY_JSON_VALUE); its `false` allows
    none, so no answer can follow it: ValueError."""
    if schema is True:
        return ANY_JSON_VALUE
    if schema is False:
        raise ValueError("the schema is false, which no value fits: no answer can follow it")
    return schema


def make_grammar(json_schema: Mapping[str, Any] | str | bool | None = None,
                 grammar: str | None = None) -> Grammar | None:
    """The llguidance grammar for a generate() request, None when nothing is constrained."""
    if json_schema is not None and json_schema is not False and grammar is not None:
        raise ValueError("give json_schema or grammar, not both")
    if grammar is not None:
        if not isinstance(grammar, str):
            raise ValueError(f"grammar must be Lark grammar text, got {type(grammar).__name__}")
        # Wrapped explicitly: llguidance reads a bare grammar string that starts with "{" as its
        # own JSON format, which would turn a wrong file into a baffling error.
        return Grammar(json.dumps({"grammars": [{"lark_grammar": grammar}]}))
    if json_schema is None or json_schema is False:
        return None
    return json_schema_grammar(json_schema)
