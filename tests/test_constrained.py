"""Constrained decoding (edgeinfer.constrain): what comes out always fits the schema or grammar,
never holds a special token, and ends with "stop" at the grammar's end. On the tiny random model
(whose output is noise, so only the constraint makes it JSON) and on the real SmolLM2 (BPE) and
Gemma 3 (SentencePiece with byte tokens)."""
from __future__ import annotations

import json
import re

import jsonschema
import pytest

from edgeinfer.constrain.grammar import (ANY_JSON_VALUE, MAX_FRACTION_DIGITS, MAX_INT_DIGITS, MAX_RECURSION_DEPTH,
                                         from_standard_schema, json_schema_grammar)
from edgeinfer.constrain.tokenizer import SPECIAL_PREFIX, token_bytes
from edgeinfer.model import Model

CONTROL = 3  # llama.cpp's token type of control tokens

# Every string and array bounded, so that even the tiny model's noise reaches the end.
BOUNDED_SCHEMAS = {
    "object_required": {
        "type": "object", "additionalProperties": False, "required": ["name", "age"],
        "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer"}}},
    "enum": {"type": "string", "enum": ["red", "green", "blue"]},
    "integer_range": {"type": "integer", "minimum": -5, "maximum": 250},
    "array_min_max_items": {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 4},
    "nested_object": {
        "type": "object", "additionalProperties": False, "required": ["user"],
        "properties": {"user": {
            "type": "object", "additionalProperties": False, "required": ["id", "score"],
            "properties": {"id": {"type": "integer", "minimum": 0}, "score": {"type": "number"}}}}},
    "any_of": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 4}, {"type": "number"}]},
}


def no_control_tokens(model: Model, tokens: list[int]) -> bool:
    return all(model.vocab.token_type(t) != CONTROL for t in tokens)


# --- the tiny random model -------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tiny_llama_path):
    return Model.load(tiny_llama_path, n_ctx=256, n_threads=2)


@pytest.mark.parametrize("temperature", [0.0, 0.7])
@pytest.mark.parametrize("name", sorted(BOUNDED_SCHEMAS))
def test_output_parses_and_validates_against_the_schema(tiny, name, temperature):
    schema = BOUNDED_SCHEMAS[name]
    result = tiny.complete([5, 6, 7], json_schema=schema, max_tokens=120, temperature=temperature, seed=7)
    assert result.finish_reason == "stop"
    jsonschema.validate(json.loads(result.text), schema)
    assert no_control_tokens(tiny, result.tokens)


def test_the_schema_may_be_json_text(tiny):
    schema = BOUNDED_SCHEMAS["object_required"]
    as_text = tiny.complete([5], json_schema=json.dumps(schema), max_tokens=60, temperature=0)
    assert as_text.text == tiny.complete([5], json_schema=schema, max_tokens=60, temperature=0).text


def test_json_schema_true_gives_a_compact_json_object(tiny):
    # Left free, noise keeps an object open, so the bias on "}" lets it close.
    close = tiny.tokenize("}", add_special=False)[0]
    result = tiny.complete([5, 6], json_schema=True, max_tokens=120, temperature=0.7, seed=3,
                           logit_bias={close: 8.0})
    assert result.finish_reason == "stop"
    assert isinstance(json.loads(result.text), dict)
    assert result.text == json.dumps(json.loads(result.text), separators=(",", ":"), ensure_ascii=False)


def test_lark_grammar(tiny):
    grammar = 'start: ("yes" | "no") " " NUM\nNUM: /[0-9]{1,3}/'
    for seed in range(3):
        result = tiny.complete([5, 6, 7], grammar=grammar, max_tokens=20, temperature=0.7, seed=seed)
        assert re.fullmatch(r"(yes|no) [0-9]{1,3}", result.text), result.text


def test_the_grammars_end_stops_generation_without_an_end_token(tiny):
    result = tiny.complete([5], grammar='start: "ab"', max_tokens=20, temperature=0.7, seed=1)
    assert (result.text, result.finish_reason, result.eog_token) == ("ab", "stop", None)


def test_max_tokens_before_the_grammars_end_is_length(tiny):
    result = tiny.complete([5], grammar='start: "a" "b" "c"', max_tokens=2, temperature=0)
    assert (result.text, result.finish_reason) == ("ab", "length")


def test_an_end_token_is_taken_where_the_grammar_may_stop(tiny):
    im_end = 2
    result = tiny.complete([5], grammar='start: "a"+', max_tokens=20, temperature=0.7, seed=1,
                           logit_bias={im_end: 50.0})
    assert (result.text, result.finish_reason, result.eog_token) == ("a", "stop", im_end)


def test_special_tokens_never_appear_inside_constrained_text(tiny):
    # <|im_start|> (id 1) pushed far above everything: it is text to a naive vocabulary mapping.
    result = tiny.complete([5], json_schema={"type": "string", "maxLength": 30}, max_tokens=60,
                           temperature=0.7, seed=2, logit_bias={1: 50.0})
    assert 1 not in result.tokens and no_control_tokens(tiny, result.tokens)
    assert "<|im_start|>" not in json.loads(result.text)


@pytest.mark.parametrize("kwargs, message", [
    ({"json_schema": {"type": "nonsense"}}, "nonsense"),
    ({"json_schema": '{"type":'}, "not valid JSON"),
    ({"json_schema": ["not", "an", "object"]}, "must be a JSON object"),
    ({"json_schema": {"type": "array", "contains": {"type": "integer"}}}, "contains"),  # not enforced: refused
    ({"grammar": "start: undefined_rule"}, "undefined_rule"),
    ({"grammar": "start: a\na: start"}, "cannot be matched"),  # compiles, but no text can start it
    ({"grammar": 'start: "a"', "json_schema": {"type": "string"}}, "not both"),
])
def test_an_invalid_schema_or_grammar_is_a_value_error_with_the_compilers_message(tiny, kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny.complete([5], max_tokens=4, **kwargs)


def test_numbers_are_bounded_unless_the_schema_bounds_them():
    grammar = json_schema_grammar({"type": "object", "properties": {
        "n": {"type": "number"}, "i": {"type": "integer", "minimum": 3},
        "m": {"type": "number", "multipleOf": 0.5, "maximum": 1e20}}})
    schema = json.loads(grammar.text)["grammars"][0]["json_schema"]
    n, i, m = (schema["properties"][k] for k in "nim")
    assert n == {"type": "number", "exclusiveMinimum": -10 ** MAX_INT_DIGITS,
                 "exclusiveMaximum": 10 ** MAX_INT_DIGITS, "multipleOf": 10.0 ** -MAX_FRACTION_DIGITS}
    assert i == {"type": "integer", "minimum": 3, "exclusiveMaximum": 10 ** MAX_INT_DIGITS}
    # a bound further out than the digit bound gives way to it (llguidance compiles none past ~1e18)
    assert m == {"type": "number", "multipleOf": 0.5, "exclusiveMaximum": 10 ** MAX_INT_DIGITS,
                 "exclusiveMinimum": -10 ** MAX_INT_DIGITS}


def test_a_bound_past_the_digit_bound_gives_way_to_it_unless_the_other_side_forbids_that():
    limit = 10 ** MAX_INT_DIGITS
    out = compiled_schema({"type": "object", "properties": {
        "low": {"type": "integer", "minimum": -10 ** 30}, "high": {"type": "integer", "maximum": 10 ** 30},
        "both": {"type": "number", "minimum": -1e30, "maximum": 1e30},
        "kept": {"type": "integer", "maximum": -10 ** 15, "minimum": -10 ** 16}}})["properties"]
    assert out["low"] == out["high"] == {"type": "integer", "exclusiveMinimum": -limit, "exclusiveMaximum": limit}
    assert out["both"] == {"type": "number", "exclusiveMinimum": -limit, "exclusiveMaximum": limit,
                           "multipleOf": 10.0 ** -MAX_FRACTION_DIGITS}
    # what fits lies beyond the digit bound: the schema's bounds stay
    assert out["kept"] == {"type": "integer", "maximum": -10 ** 15, "minimum": -10 ** 16}


@pytest.mark.parametrize("schema", [{"const": 10 ** 30}, {"type": "integer", "minimum": 2 ** 64},
                                    {"type": "array", "items": {"enum": [1, -10 ** 4000]}}])
def test_an_integer_past_64_bits_that_cannot_give_way_is_a_value_error_saying_so(schema):
    with pytest.raises(ValueError, match="integers in a schema must fit in 64 bits") as e:
        json_schema_grammar(schema)
    assert len(str(e.value)) < 200   # a 4000-digit integer is not echoed


def test_json_schemas_own_booleans_mean_any_value_and_no_value():
    assert from_standard_schema(True) == ANY_JSON_VALUE
    assert from_standard_schema({"type": "string"}) == {"type": "string"}
    with pytest.raises(ValueError, match="the schema is false, which no value fits"):
        from_standard_schema(False)


def test_schema_text_reads_true_and_false_as_json_schema_does():
    """A --json-schema file holding `true` allows any value (not only objects, as Python's True
    does); `false` allows none."""
    def compiled(schema):
        return json.loads(json_schema_grammar(schema).text)["grammars"][0]["json_schema"]
    assert compiled("true") == compiled(ANY_JSON_VALUE) != compiled(True)
    with pytest.raises(ValueError, match="the schema is false"):
        json_schema_grammar(" false ")


def test_objects_with_listed_properties_are_closed_unless_the_schema_opens_them():
    def compiled(schema):
        return json.loads(json_schema_grammar(schema).text)["grammars"][0]["json_schema"]
    assert compiled({"type": "object", "properties": {"a": {}}})["additionalProperties"] is False
    assert compiled({"type": "object", "properties": {"a": {}}, "additionalProperties": True})["additionalProperties"] is True
    assert "additionalProperties" not in compiled({"type": "object", "patternProperties": {"^x": {}}, "properties": {}})
    assert "additionalProperties" not in compiled({"type": "object"})   # "any object" stays any object
    assert compiled({"type": "object", "properties": {"a": {}}, "enum": [{"properties": 1}]})["enum"] == [{"properties": 1}]


def compiled_schema(schema) -> dict:
    return json.loads(json_schema_grammar(schema).text)["grammars"][0]["json_schema"]


def test_times_get_a_length_that_leaves_nine_fraction_digits():
    out = compiled_schema({"type": "object", "properties": {
        "t": {"type": "string", "format": "time"}, "dt": {"type": "string", "format": "date-time"},
        "short": {"type": "string", "format": "time", "maxLength": 8}}})["properties"]
    assert out["t"]["maxLength"] == len("23:59:59.123456789+01:00")
    assert out["dt"]["maxLength"] == len("2026-11-26T23:59:59.123456789+01:00")
    assert out["short"]["maxLength"] == 8


TREE = {"$defs": {"node": {"type": "object", "required": ["v"], "properties": {
    "v": {"type": "integer", "minimum": 0, "maximum": 9},
    "kids": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}}}},
    "$ref": "#/$defs/node"}


def test_recursion_is_unrolled_to_a_bounded_depth():
    out = compiled_schema(TREE)
    copies = sorted(k for k in out["$defs"] if k != "node")
    assert len(copies) == MAX_RECURSION_DEPTH
    deepest = out["$defs"][copies[-1]]["properties"]["kids"]["items"]
    assert deepest is False
    # a self-reference through the root ("#") too
    linked = compiled_schema({"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}})
    assert len(linked["$defs"]) == MAX_RECURSION_DEPTH


def depth(value) -> int:
    return 1 + max((depth(k) for k in value.get("kids", [])), default=0)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_recursive_schemas_finish_within_the_depth(tiny, seed):
    result = tiny.complete([5, 6, 7], json_schema=TREE, max_tokens=240, temperature=1.0, seed=seed)
    assert result.finish_reason == "stop", result.text
    tree = json.loads(result.text)
    jsonschema.validate(tree, TREE)
    assert depth(tree) <= MAX_RECURSION_DEPTH + 1


# --- the real models ---------------------------------------------------------------------------
REAL_SCHEMAS = {
    "person": {
        "type": "object", "additionalProperties": False, "required": ["name", "age", "email"],
        "properties": {"name": {"type": "string", "maxLength": 40},
                       "age": {"type": "integer", "minimum": 0, "maximum": 130},
                       "email": {"type": "string", "format": "email", "maxLength": 40}}},
    "sentiment": {
        "type": "object", "additionalProperties": False, "required": ["label", "confidence"],
        "properties": {"label": {"enum": ["positive", "negative", "neutral"]},
                       "confidence": {"type": "number", "minimum": 0, "maximum": 1}}},
    "shopping_list": {
        "type": "object", "additionalProperties": False, "required": ["items"],
        "properties": {"items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
            "type": "object", "additionalProperties": False, "required": ["item", "quantity"],
            "properties": {"item": {"type": "string", "maxLength": 20},
                           "quantity": {"type": "integer", "minimum": 1, "maximum": 12}}}}}},
    "event": {
        "type": "object", "additionalProperties": False, "required": ["title", "when"],
        "properties": {"title": {"type": "string", "maxLength": 40},
                       "when": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]}}},
}
PROMPT = "Answer in JSON. {}"
QUESTIONS = {
    "person": "Make up a person with a name, an age and an email address.",
    "sentiment": "What is the sentiment of: 'I loved this film'?",
    "shopping_list": "List two things to buy for a picnic.",
    "event": "Make up a meeting with a title and a date.",
}


@pytest.fixture(scope="module", params=["smollm2_path", "gemma3_path"])
def real(request):
    return Model.load(request.getfixturevalue(request.param), n_ctx=1024, n_threads=2)


@pytest.mark.realmodel
@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_real_models_answer_every_schema_with_valid_json(real, temperature):
    for name, schema in REAL_SCHEMAS.items():
        prompt = real.chat_prompt(PROMPT.format(QUESTIONS[name])).ids
        result = real.complete(prompt, json_schema=schema, max_tokens=200, temperature=temperature, seed=11)
        assert result.finish_reason == "stop", (name, result.text)
        jsonschema.validate(json.loads(result.text), schema, format_checker=jsonschema.FormatChecker())
        assert no_control_tokens(real, result.tokens), name


@pytest.mark.realmodel
def test_real_models_follow_a_lark_grammar(real):
    grammar = 'start: "The answer is " ("yes" | "no") "."'
    result = real.complete(real.chat_prompt("Is Paris in France?").ids, grammar=grammar, max_tokens=30,
                           temperature=0.7, seed=5)
    assert re.fullmatch(r"The answer is (yes|no)\.", result.text) and result.finish_reason == "stop"


@pytest.mark.realmodel
def test_vocabulary_bytes_for_llguidance(real):
    vocab = real.vocab
    ids = range(vocab.n_tokens)
    controls = [i for i in ids if vocab.token_type(i) == CONTROL]
    assert controls and all(token_bytes(vocab, i).startswith(SPECIAL_PREFIX) for i in controls)
    space_word = real.tokenize(" the", add_special=False)
    assert [token_bytes(vocab, i) for i in space_word] == [b" the"]
    byte_tokens = [i for i in ids if vocab.token_type(i) == 6]  # SentencePiece <0xNN>
    for i in byte_tokens:
        assert token_bytes(vocab, i) == bytes([int(vocab.token_text(i)[3:5], 16)])
    assert bool(byte_tokens) == (vocab.model == "llama")
