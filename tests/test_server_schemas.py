"""response_format through the real server with the real `openai` client, on both real models:
a dozen schemas covering the JSON Schema features people use, each answer validated with
`jsonschema` (formats checked); streamed answers equal the non-streamed ones; what cannot be
enforced is a 400 naming the feature. Strings and arrays carry bounds so that the answer fits in
max_tokens whatever the model likes to write: what is tested is the enforcement."""
from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from support.server_process import openai_client

S = {"type": "string", "maxLength": 24}
SCHEMAS = {
    "nested_object": ({"type": "object", "required": ["name", "address"], "properties": {
        "name": S, "address": {"type": "object", "required": ["city", "country"], "properties": {
            "city": S, "country": S, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}}},
        "A person and where they live."),
    "array_of_objects": ({"type": "object", "required": ["items"], "properties": {"items": {
        "type": "array", "minItems": 2, "maxItems": 3, "items": {
            "type": "object", "required": ["item", "qty"], "properties": {
                "item": S, "qty": {"type": "integer", "minimum": 1, "maximum": 9}}}}}},
        "A shopping list of two or three things."),
    "enum_and_const": ({"type": "object", "required": ["kind", "label", "version"], "properties": {
        "kind": {"const": "review"}, "label": {"enum": ["positive", "negative", "neutral"]},
        "version": {"enum": [1, 2, None]}}}, "Classify the review: 'I loved this film'."),
    "numeric_ranges": ({"type": "object", "required": ["celsius", "humidity", "floor"], "properties": {
        "celsius": {"type": "number", "minimum": -50, "maximum": 60},
        "humidity": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "floor": {"type": "integer", "minimum": -3, "maximum": 120, "multipleOf": 2}}},
        "The weather today and which floor you are on."),
    "string_bounds_and_pattern": ({"type": "object", "required": ["code", "word"], "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
        "word": {"type": "string", "minLength": 3, "maxLength": 8}}}, "A product code and one word."),
    "formats": ({"type": "object", "required": ["date", "time", "at", "email", "id"], "properties": {
        "date": {"type": "string", "format": "date"}, "time": {"type": "string", "format": "time"},
        "at": {"type": "string", "format": "date-time"},
        "email": {"type": "string", "format": "email", "maxLength": 30},
        "id": {"type": "string", "format": "uuid"}}}, "A meeting: date, time, timestamp, organiser email, id."),
    "any_of_one_of": ({"type": "object", "required": ["answer", "unit"], "properties": {
        "answer": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 100}, {"type": "string", "maxLength": 10}]},
        "unit": {"oneOf": [{"const": "legs"}, {"type": "null"}]}}}, "How many legs does a spider have?"),
    "nullable": ({"type": "object", "required": ["nickname", "age"], "properties": {
        "nickname": {"type": ["string", "null"], "maxLength": 12},
        "age": {"type": ["integer", "null"], "minimum": 0, "maximum": 120}}}, "A person's nickname and age."),
    "recursive_ref": ({"$defs": {"node": {"type": "object", "required": ["name"], "properties": {
        "name": S, "children": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}}}},
        "$ref": "#/$defs/node"}, "A small family tree: a parent with one child."),
    "additional_properties": ({"type": "object", "minProperties": 1, "maxProperties": 3,
                               "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 99}},
                              "Count the fruit in a bowl, by fruit."),
    "property_names": ({"type": "object", "minProperties": 1, "maxProperties": 3,
                        "propertyNames": {"pattern": "^[a-z]{2,10}$"},
                        "additionalProperties": {"type": "boolean"}}, "Which of these do you like: tea, coffee, milk?"),
    "unique_items": ({"type": "object", "required": ["tags"], "properties": {"tags": {
        "type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 3, "maxItems": 5,
        "uniqueItems": True}}}, "Five tags for a blog post about pasta."),
}
MODEL = "schema-test"


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def client(request, tmp_path_factory):
    path = request.getfixturevalue(f"{request.param}_path")
    with openai_client(path, MODEL, tmp_path_factory.mktemp("schemas"), "-c", "2048") as client:
        yield client


def ask(client, name: str, **kwargs):
    schema, question = SCHEMAS[name]
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": f"Answer in JSON. {question}"}],
        response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}},
        max_tokens=300, temperature=0.7, seed=5, **kwargs)


def validate(name: str, content: str) -> None:
    jsonschema.validate(json.loads(content), SCHEMAS[name][0], format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


@pytest.mark.realmodel
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_every_answer_validates_against_its_schema(client, name):
    choice = ask(client, name).choices[0]
    assert choice.finish_reason == "stop", choice.message.content
    validate(name, choice.message.content)


@pytest.mark.realmodel
@pytest.mark.parametrize("name", ["unique_items", "nested_object"])
def test_a_streamed_answer_is_the_non_streamed_one(client, name):
    whole = ask(client, name).choices[0].message.content
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in ask(client, name, stream=True)
                       if chunk.choices)
    assert streamed == whole
    validate(name, streamed)


@pytest.mark.realmodel
def test_text_completions_take_response_format_too(client):
    schema = SCHEMAS["enum_and_const"][0]
    out = client.completions.create(model=MODEL, prompt="A film review, classified as JSON: ", max_tokens=60,
                                    temperature=0, extra_body={"response_format": {
                                        "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert out.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(out.choices[0].text), schema)


@pytest.mark.realmodel
@pytest.mark.parametrize("schema, feature", [
    ({"type": "object", "properties": {"a": {"not": {"type": "integer"}}}}, "not"),
    ({"type": "array", "contains": {"type": "integer"}}, "contains"),
    ({"type": "object", "propertyNames": {"format": "email"}}, "propertyNames"),
    ({"if": {"type": "integer"}, "then": {"minimum": 1}}, "if"),
    ({"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 3, "uniqueItems": True}, "distinct values"),
])
def test_what_cannot_be_enforced_is_refused_naming_the_feature(client, schema, feature):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=5,
                                       response_format={"type": "json_schema",
                                                        "json_schema": {"name": "x", "schema": schema}})
    error = e.value.body
    assert error["param"] == "response_format" and error["code"] == "invalid_schema"
    assert feature in error["message"]


@pytest.mark.realmodel
def test_a_schema_found_unsatisfiable_while_decoding_is_a_400(client):
    schema = {"type": "array", "items": {"type": "string", "pattern": "^[ab]$"}, "minItems": 3, "uniqueItems": True}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Three letters."}],
                                       max_tokens=40, temperature=0, response_format={
                                           "type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert e.value.body["code"] == "invalid_schema" and "unique" in e.value.body["message"]
