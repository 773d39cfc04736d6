"""gpt-oss's tool calls (harmony): found from its chat template, read back from the model's own
messages and from the template's, whole and streamed a character at a time, enforced by a grammar
that lets analysis come first, and sent by the server as OpenAI tool_calls beside the reasoning.

The template is OpenAI's as llama.cpp keeps it (scripts/fetch_chat_templates.py); it goes into a
tiny random-weight GGUF whose vocabulary holds harmony's special tokens.
"""
from __future__ import annotations

import json

import jsonschema
import pytest

from edgeinfer.chat_answer import ChatAnswerStream, read_answer
from edgeinfer.model import Model
from edgeinfer.reasoning import Reasoning, ReasoningStyle
from edgeinfer.tools.formats import HARMONY
from edgeinfer.tools.parse import ArgumentsDelta, CallStart, ContentDelta
from support.template_models import tiny_model_with_template

pytestmark = pytest.mark.filterwarnings("ignore:the chat prompt starts with two BOS tokens")

TEMPLATE = "openai-gpt-oss-120b.jinja"
SPECIAL = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>", "<|call|>", "<|return|>"]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.", "parameters": {
    "type": "object", "required": ["city"], "properties": {"city": {"type": "string", "maxLength": 8}}}}}
ADD = {"type": "function", "function": {"name": "add", "description": "Adds integers.", "parameters": {
    "type": "object", "required": ["a", "b"], "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "integer", "minimum": 0, "maximum": 99}}}}}
TOOLS = [WEATHER, ADD]
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
QUESTION = [{"role": "user", "content": "Weather in Paris?"}]
HARMONY_STYLE = ReasoningStyle("harmony")

# What gpt-oss writes after the generation prompt's <|start|>assistant: the recipient in the
# channel part, with <|constrain|>; and the template's own way, the recipient in the role part.
MODEL_CALL = ('<|channel|>analysis<|message|>Need the weather tool.<|end|><|start|>assistant<|channel|>commentary'
              ' to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}')
TEMPLATE_CALL = ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}'


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Model:
    return tiny_model_with_template(tmp_path_factory.mktemp("harmony"), TEMPLATE, SPECIAL, n_threads=2)


def events_of(text: str, chunks: list[str]):
    stream = ChatAnswerStream(HARMONY_STYLE, HARMONY)
    events = [e for chunk in chunks for e in stream.feed(chunk)] + stream.finish()
    return stream, events


@pytest.mark.parametrize("text, reasoning", [(MODEL_CALL, "Need the weather tool."), (TEMPLATE_CALL, None)])
def test_a_call_reads_back_whole_and_streamed(text, reasoning):
    whole = read_answer(text, HARMONY_STYLE, HARMONY)
    assert [(c.name, json.loads(c.arguments)) for c in whole.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert whole.reasoning == reasoning and whole.content is None
    stream, events = events_of(text, list(text))
    assert [e.name for e in events if isinstance(e, CallStart)] == ["get_weather"]
    assert json.loads("".join(e.text for e in events if isinstance(e, ArgumentsDelta))) == {"city": "Paris"}
    assert "".join(e.text for e in events if isinstance(e, Reasoning)) == (reasoning or "")
    assert not [e for e in events if isinstance(e, ContentDelta)]


def test_a_preamble_is_content_and_a_final_answer_is_no_call():
    text = ("<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.add"
            ' <|constrain|>json<|message|>{"a":1,"b":2}<|call|>')
    answer = read_answer(text, HARMONY_STYLE, HARMONY)
    assert answer.content == "Checking." and [c.name for c in answer.tool_calls] == ["add"]
    final = read_answer("<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hi.",
                        HARMONY_STYLE, HARMONY)
    assert (final.reasoning, final.content, final.tool_calls) == ("Easy.", "Hi.", [])


def test_the_format_is_found_from_the_template(model):
    support = model.tool_support
    assert support.format is HARMONY
    assert support.caps.tools and support.caps.tool_calls and support.caps.tool_responses
    assert set(support.special_ids) == {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>"}


def accepts(model, choice, text) -> bool:
    plan = model.plan_tools(QUESTION, TOOLS, choice)
    matcher = model.compile_constraint(grammar=plan.grammar)
    return all(matcher.try_consume(t) for t in model.tokenize(text, add_special=False, parse_special=True)) \
        and matcher.is_accepting


def test_the_grammar_allows_analysis_first_and_either_header(model):
    final = "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>final<|message|>Sunny."
    compact = TEMPLATE_CALL.replace(", ", ",").replace(": ", ":")
    assert accepts(model, "required", MODEL_CALL)
    assert accepts(model, "required", compact)
    assert accepts(model, "auto", MODEL_CALL) and accepts(model, "auto", final)
    assert not accepts(model, "required", final)
    assert not accepts(model, {"type": "function", "function": {"name": "add"}}, MODEL_CALL)


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "add"}}])
def test_decoding_under_the_grammar_gives_one_call_that_validates(model, tool_choice):
    result = model.chat_complete(QUESTION, tools=TOOLS, tool_choice=tool_choice, max_tokens=150,
                                 temperature=0.8, seed=5)
    assert result.finish_reason == "tool_calls" and len(result.tool_calls) == 1, result.text
    call = result.tool_calls[0]
    assert isinstance(tool_choice, str) or call.name == "add"
    jsonschema.validate(json.loads(call.arguments), PARAMETERS[call.name])


def test_a_tool_result_goes_back_as_the_template_expects(model):
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = QUESTION + [{"role": "assistant", "content": None, "tool_calls": [call], "thinking": "Need it."},
                           {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    plan = model.plan_tools(messages, TOOLS, "auto")
    prompt = model.chat_template.render(plan.messages, tools=plan.template_tools)
    assert ('<|start|>assistant<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant to=functions.get_weather'
            '<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>') in prompt
    assert '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"sunny"<|end|>' in prompt
    assert prompt.endswith("<|start|>assistant")


# --- the server's response layer ----------------------------------------------------------------

class PieceVocab:
    def token_to_piece(self, token, special):
        return b"?"


def finished_with(text: str):
    from edgeinfer.generate import GenerationResult
    from edgeinfer.server.worker import Finished
    result = GenerationResult(prompt_tokens=1, text=text, finish_reason="stop")
    return Finished(result, [], 0.0, 0.0)


# gpt-oss's text as its tokens would come: markers whole, words split
MODEL_PIECES = ["<|channel|>", "analysis", "<|message|>", "Need", " the weather tool.", "<|end|>", "<|start|>",
                "assistant", "<|channel|>", "commentary", " to", "=functions", ".get", "_weather", " ",
                "<|constrain|>", "json", "<|message|>", '{"', "city", '":"', "Paris", '"}']


def test_the_server_sends_tool_calls_beside_the_reasoning():
    from edgeinfer.server.responses import ChatResponses
    assert "".join(MODEL_PIECES) == MODEL_CALL
    whole = ChatResponses("m", "fp", PieceVocab(), False, HARMONY, HARMONY_STYLE).whole(
        MODEL_CALL, [], finished_with(MODEL_CALL))
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["reasoning_content"] == "Need the weather tool." and choice["message"]["content"] is None
    [call] = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}

    streamed = ChatResponses("m", "fp", PieceVocab(), False, HARMONY, HARMONY_STYLE)
    chunks = [c for p in MODEL_PIECES for c in streamed.deltas(p, [])] + streamed.final(finished_with(MODEL_CALL))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "Need the weather tool."
    assert not any(d.get("content") for d in deltas)
    calls = [t for d in deltas for t in d.get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
    assert "".join(t["function"]["arguments"] for t in calls) == '{"city":"Paris"}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_chat_complete_carries_the_reasoning_apart_from_the_content(model):
    def token(text):
        [i] = model.tokenize(text, add_special=False, parse_special=True)
        return f"<[{i}]>"
    # the random model's noise made into gpt-oss's messages
    grammar = (f'start: {token("<|channel|>")} "analysis" {token("<|message|>")} "Think." {token("<|end|>")} '
               f'{token("<|start|>")} "assistant" {token("<|channel|>")} "final" {token("<|message|>")} "Done."')
    result = model.chat_complete(QUESTION, grammar=grammar, max_tokens=60)
    assert (result.reasoning_content, result.content) == ("Think.", "Done.")
    assert "<|channel|>" in result.text   # the raw text keeps the markup
