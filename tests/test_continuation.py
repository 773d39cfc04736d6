"""A final assistant message continued instead of answered (edgeinfer.continuation: llama-server's
assistant prefill and `continue_final_message`), and reasoning_format "none" for harmony.

Prompts are checked on the chat templates llama.cpp ships (gpt-oss's harmony, Qwen3's <think>)
in tiny random-weight models whose vocabularies hold the templates' markers, and on SmolLM2's
ChatML through the server's request handling (`chat_job`) and a real server."""
from __future__ import annotations

import httpx
import pytest

from edgeinfer.chat_answer import ChatAnswerStream
from edgeinfer.chat_template import tokenize_chat_prompt
from edgeinfer.model import Model
from edgeinfer.reasoning import ReasoningStyle
from edgeinfer.server.config import ServerConfig
from edgeinfer.server.errors import APIError
from edgeinfer.server.prompts import chat_job
from edgeinfer.server.schemas import ChatCompletionRequest
from edgeinfer.tools.formats import HARMONY
from support.server_process import ServerProcess
from support.template_models import tiny_model_with_template

pytestmark = pytest.mark.filterwarnings("ignore:the chat prompt starts with two BOS tokens")

HARMONY_MARKERS = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>", "<|call|>", "<|return|>"]
QUESTION = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory) -> Model:
    return tiny_model_with_template(tmp_path_factory.mktemp("harmony"), "openai-gpt-oss-120b.jinja", HARMONY_MARKERS)


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> Model:
    return tiny_model_with_template(tmp_path_factory.mktemp("qwen3"), "Qwen-Qwen3-0.6B.jinja")


def request(messages, **fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(model="m", messages=messages, max_tokens=8, **fields)


def ids_of(model: Model, messages, **fields) -> list[int]:
    return chat_job(request(messages, **fields), model, ServerConfig()).prompt


def tokens(model: Model, text: str) -> list[int]:
    return tokenize_chat_prompt(model._core.vocab, text)


def read(style: ReasoningStyle, pieces: list[str], tool_format=None) -> ChatAnswerStream:
    """The answer read from `pieces`; the same read character by character must agree."""
    whole, chars = ChatAnswerStream(style, tool_format), ChatAnswerStream(style, tool_format)
    for p in pieces:
        whole.feed(p)
    whole.finish()
    for c in "".join(pieces):
        chars.feed(c)
    chars.finish()
    def calls(answer):   # (the ids are random)
        return [(c.name, c.arguments) for c in answer.tool_calls]
    assert (whole.reasoning, whole.content, calls(whole)) == (chars.reasoning, chars.content, calls(chars))
    return whole


# --- prompts -------------------------------------------------------------------------------------

def test_harmony_continues_the_final_channel_after_the_reasoning(gpt_oss):
    prefill = {"role": "assistant", "reasoning_content": "Look it up.", "content": "The weather in"}
    before = gpt_oss.chat_prompt(QUESTION, add_generation_prompt=False).text
    assert ids_of(gpt_oss, QUESTION + [prefill]) == tokens(gpt_oss, before + (
        "<|start|>assistant<|channel|>analysis<|message|>Look it up.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>The weather in"))
    # only reasoning: its analysis goes on (continue_final_message true picks the last part)
    ids = ids_of(gpt_oss, QUESTION + [{"role": "assistant", "reasoning_content": "First, the"}],
                 continue_final_message=True, add_generation_prompt=False)
    assert ids == tokens(gpt_oss, before + "<|start|>assistant<|channel|>analysis<|message|>First, the")


def test_harmony_without_a_generation_prompt_ends_the_last_message_with_end_not_return(gpt_oss):
    answered = QUESTION + [{"role": "assistant", "content": "Sunny."}]
    rendered = gpt_oss.chat_prompt(answered, add_generation_prompt=False).text
    assert rendered.endswith("Sunny.<|return|>")   # the template closes a finished conversation
    ids = ids_of(gpt_oss, answered, continue_final_message=False, add_generation_prompt=False)
    assert ids == tokens(gpt_oss, rendered[:-len("<|return|>")] + "<|end|>")


def test_think_templates_reopen_the_reasoning_and_close_it_for_content(qwen3):
    opened = qwen3.chat_prompt(QUESTION).text
    assert opened.endswith("<|im_start|>assistant\n")
    ids = ids_of(qwen3, QUESTION + [{"role": "assistant", "reasoning_content": "Hm.", "content": "It is"}])
    assert ids == tokens(qwen3, opened + "<think>Hm.</think>It is")
    ids = ids_of(qwen3, QUESTION + [{"role": "assistant", "content": "", "reasoning_content": "So"}])
    assert ids == tokens(qwen3, opened + "<think>So")


def test_continuation_is_read_from_inside_the_part_it_continues(qwen3, gpt_oss):
    job = chat_job(request(QUESTION + [{"role": "assistant", "reasoning_content": "So"}]), qwen3, ServerConfig())
    answer = read(job.reasoning, [" the answer", " is 4.</think>", "4"])
    assert (answer.reasoning, answer.content) == (" the answer is 4.", "4")   # the leading space is kept
    job = chat_job(request(QUESTION + [{"role": "assistant", "content": "The weather in"}]), gpt_oss, ServerConfig())
    answer = read(job.reasoning, [" Paris", " is sunny."])
    assert (answer.reasoning, answer.content) == (None, " Paris is sunny.")


@pytest.mark.parametrize("messages,fields,message", [
    (QUESTION + [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}], {},
     "2 or more assistant messages"),
    (QUESTION + [{"role": "assistant", "content": "a"}], {"continue_final_message": True},
     "both add_generation_prompt and continue_final_message"),
    (QUESTION, {"continue_final_message": "content", "add_generation_prompt": False}, "needs an assistant message"),
    (QUESTION + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}],
     {"continue_final_message": True, "add_generation_prompt": False}, "contains tool calls"),
])
def test_requests_that_cannot_continue_are_refused_with_the_reason(gpt_oss, messages, fields, message):
    with pytest.raises(APIError, match=message) as info:
        chat_job(request(messages, **fields), gpt_oss, ServerConfig())
    assert info.value.status == 400


# --- reasoning_format "none" with harmony ----------------------------------------------------------

MODEL_CALL = ["<|channel|>", "analysis", "<|message|>", "Need", " the weather tool.", "<|end|>", "<|start|>",
              "assistant", "<|channel|>", "commentary", " to", "=functions", ".get", "_weather", " ",
              "<|constrain|>", "json", "<|message|>", '{"', "city", '":"', "Paris", '"}']
MODEL_ANSWER = ["<|channel|>", "analysis", "<|message|>", "User asks.", "<|end|>", "<|start|>", "assistant",
                "<|channel|>", "final", "<|message|>", "2 + 2", " = 4."]


def test_none_keeps_the_analysis_in_the_content_with_its_markers_and_still_reads_calls(gpt_oss):
    job = chat_job(request(QUESTION, reasoning_format="none"), gpt_oss, ServerConfig())
    assert job.reasoning == ReasoningStyle("harmony", raw=True)
    answer = read(job.reasoning, MODEL_ANSWER)
    assert (answer.reasoning, answer.content) == (None, "<|channel|>analysis<|message|>User asks.<|end|>2 + 2 = 4.")
    answer = read(job.reasoning, MODEL_CALL, HARMONY)
    assert answer.content == "<|channel|>analysis<|message|>Need the weather tool.<|end|>"
    [call] = answer.tool_calls
    assert (call.name, call.arguments) == ("get_weather", '{"city":"Paris"}')


def test_none_leaves_think_markers_as_generated(qwen3):
    job = chat_job(request(QUESTION, reasoning_format="none"), qwen3, ServerConfig())
    assert job.reasoning is None


# --- the real model through the server ---------------------------------------------------------------

@pytest.mark.realmodel
def test_the_server_continues_a_prefilled_answer(smollm2_path, tmp_path):
    model = Model.load(smollm2_path, n_ctx=512, n_threads=1)
    ask = [{"role": "user", "content": "What is the capital of France?"}]
    prefill = "The capital of France is"
    expected = model.tokenize(model.chat_prompt(ask).text + prefill, add_special=False, parse_special=True)
    proc = ServerProcess(smollm2_path, "-c", "512", "-n", "16", log_path=tmp_path / "server.log")
    try:
        def post(messages, **fields):
            return httpx.post(f"{proc.url}/v1/chat/completions", timeout=60, json={
                "messages": messages, "max_tokens": 8, "temperature": 0, **fields})
        body = post(ask + [{"role": "assistant", "content": prefill}]).json()
        assert body["usage"]["prompt_tokens"] == len(expected)
        assert "Paris" in body["choices"][0]["message"]["content"]
        # false answers the final message with a new turn instead
        body = post(ask + [{"role": "assistant", "content": prefill}], continue_final_message=False).json()
        assert body["usage"]["prompt_tokens"] > len(expected)
        bad = post(ask + [{"role": "assistant", "content": prefill}], continue_final_message=True)
        assert bad.status_code == 400 and "add_generation_prompt" in bad.json()["error"]["message"]
    finally:
        proc.stop()
