"""What the caller asks for -> an llguidance grammar (a string llguidance.LLMatcher compiles).

Three requests, exactly one at a time:
  json_schema=<dict or JSON text>   text that validates against the schema
  json_schema=True                  any JSON object (ANY_JSON_OBJECT; OpenAI's "json_object")
  grammar=<Lark text>               llguidance's Lark dialect (https://github.com/guidance-ai/llguidance)

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
    no exponent). Bounds the schema states itself are kept. Values a schema leaves untyped
    (`{}`, `additionalProperties: true`) are llguidance's free JSON and stay unbounded.
Schema features llguidance cannot enforce are errors, never silently dropped (lenient stays off).
"""
from __future__ import annotations

import json
from typing import Any, Mapping

import llguidance

MAX_INT_DIGITS = 12
MAX_FRACTION_DIGITS = 6

# Options llguidance's JSON compiler takes (JsonCompileOptions): compact JSON.
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}

# Any JSON object, its values spelled out so that the number bounds reach them.
ANY_JSON_OBJECT: dict[str, Any] = {
    "type": "object",
    "additionalProperties": {"$ref": "#/$defs/value"},
    "$defs": {"value": {"anyOf": [
        {"type": "null"}, {"type": "boolean"}, {"type": "number"}, {"type": "string"},
        {"type": "array", "items": {"$ref": "#/$defs/value"}},
        {"type": "object", "additionalProperties": {"$ref": "#/$defs/value"}},
    ]}},
}

# Keywords whose values are JSON data, not subschemas: the bounds walk does not enter them.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples", "x-guidance"})
_LOWER_KEYS = ("minimum", "exclusiveMinimum")
_UPPER_KEYS = ("maximum", "exclusiveMaximum")


def _bound(node: Any) -> Any:
    """A copy of schema `node` with closed objects and digit bounds (see the module doc)."""
    if isinstance(node, list):
        return [_bound(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: (v if k in _DATA_KEYWORDS else _bound(v)) for k, v in node.items()}
    if "properties" in out and "additionalProperties" not in out and "patternProperties" not in out:
        out["additionalProperties"] = False
    types = out.get("type")
    types = set(types) if isinstance(types, list) else {types}
    if not types & {"number", "integer"}:
        return out
    limit = 10 ** MAX_INT_DIGITS
    lower = next((out[k] for k in _LOWER_KEYS if isinstance(out.get(k), (int, float))
                  and not isinstance(out.get(k), bool)), None)
    upper = next((out[k] for k in _UPPER_KEYS if isinstance(out.get(k), (int, float))
                  and not isinstance(out.get(k), bool)), None)
    # A default bound that would contradict the schema's own bound on the other side is left out.
    if lower is None and (upper is None or upper > -limit):
        out["exclusiveMinimum"] = -limit
    if upper is None and (lower is None or lower < limit):
        out["exclusiveMaximum"] = limit
    if "number" in types and "multipleOf" not in out:
        out["multipleOf"] = 10.0 ** -MAX_FRACTION_DIGITS
    return out


def bounded_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` with the bounds above (closed objects, digit limits), for grammars built
    around schemas elsewhere (tool-call arguments)."""
    return _bound(dict(schema))


def json_schema_grammar(schema: Mapping[str, Any] | str | bool) -> str:
    """The grammar for `schema` (a dict, its JSON text, or True for any JSON object).
    ValueError if it is not a JSON object; schema errors show when the grammar is compiled."""
    if schema is True:
        schema = ANY_JSON_OBJECT
    elif isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise ValueError(f"json_schema is not valid JSON: {e}") from None
    if not isinstance(schema, Mapping):
        raise ValueError(f"json_schema must be a JSON object (a dict), or True for any JSON object; "
                         f"got {type(schema).__name__}")
    return llguidance.LLMatcher.grammar_from_json_schema(_bound(dict(schema)), defaults=JSON_OPTIONS)


def make_grammar(json_schema: Mapping[str, Any] | str | bool | None = None, grammar: str | None = None) -> str | None:
    """The llguidance grammar for a generate() request, None when nothing is constrained."""
    if json_schema is not None and json_schema is not False and grammar is not None:
        raise ValueError("give json_schema or grammar, not both")
    if grammar is not None:
        if not isinstance(grammar, str):
            raise ValueError(f"grammar must be Lark grammar text, got {type(grammar).__name__}")
        # Wrapped explicitly: llguidance reads a bare grammar string that starts with "{" as its
        # own JSON format, which would turn a wrong file into a baffling error.
        return json.dumps({"grammars": [{"lark_grammar": grammar}]})
    if json_schema is None or json_schema is False:
        return None
    return json_schema_grammar(json_schema)
