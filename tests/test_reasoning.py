"""Reasoning read apart from the answer (edgeinfer.reasoning): gpt-oss's harmony channels and
<think> tags give the same reasoning and answer whole and streamed one character at a time, no
marker ever reaches the answer, and the server sends the reasoning as reasoning_content (in the
message and as stream deltas) with a scripted engine writing gpt-oss's text."""
from __future__ import annotations

import asyncio
import json

import pytest

from edgeinfer.generate import GenerationResult
from edgeinfer.reasoning import Answer, Reasoning, ReasoningStream, ReasoningStyle, reasoning_style
from edgeinfer.server.metrics import Metrics
from edgeinfer.server.responses import ChatResponses
from edgeinfer.server.sse import stream_job
from edgeinfer.server.worker import Engine, Finished, GenerationJob, Piece

HARMONY = ReasoningStyle("harmony")
GPT_OSS_ANSWER = ("<|channel|>analysis<|message|>User asks 2+2. Answer: 4.<|end|>"
                  "<|start|>assistant<|channel|>final<|message|>2 + 2 = **4**.")
MARKERS = ("<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<think>", "</think>")


def read(style: ReasoningStyle, chunks: list[str]) -> tuple[str, str, list]:
    stream = ReasoningStream(style)
    pieces = []
    for chunk in chunks:
        pieces += stream.feed(chunk)
    pieces += stream.finish()
    reasoning = "".join(p.text for p in pieces if isinstance(p, Reasoning))
    content = "".join(p.text for p in pieces if isinstance(p, Answer))
    assert (reasoning, content) == (stream.reasoning, stream.content)
    return reasoning, content, pieces


CASES = [
    (HARMONY, GPT_OSS_ANSWER, "User asks 2+2. Answer: 4.", "2 + 2 = **4**."),
    # a preamble on the commentary channel is answer text; a call to a tool nobody offered is dropped
    (HARMONY, "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>commentary<|message|>"
              "Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.web <|constrain|>json"
              "<|message|>{\"q\": 1}<|end|><|start|>assistant<|channel|>final<|message|>Done.",
     "Think.", "Checking.Done."),
    (HARMONY, "<|channel|>final<|message|>Only an answer, a < b and <|x|>.", "", "Only an answer, a < b and <|x|>."),
    (HARMONY, "No format at all <b>", "", "No format at all <b>"),
    (HARMONY, "<|channel|>analysis<|message|>cut short by max_tok", "cut short by max_tok", ""),
    (ReasoningStyle("think"), "<think>\nStep 1. Step 2.\n</think>\n\nThe answer: <b>4</b>.",
     "Step 1. Step 2.", "The answer: <b>4</b>."),
    (ReasoningStyle("think"), "Plain answer with no thinking.", "", "Plain answer with no thinking."),
    (ReasoningStyle("think", open=True), "thinking already open\n</think>\n\nAnswer.", "thinking already open", "Answer."),
]


@pytest.mark.parametrize("style, text, reasoning, content", CASES)
def test_whole_and_character_by_character_agree(style, text, reasoning, content):
    assert read(style, [text])[:2] == (reasoning, content)
    got_r, got_c, pieces = read(style, list(text))
    assert (got_r, got_c) == (reasoning, content)
    assert not any(m in p.text for p in pieces for m in MARKERS)


def test_style_comes_from_the_template():
    gpt_oss = "{{ '<|start|>assistant<|channel|>final<|message|>' }}"
    qwen3 = "{% if x %}<think>\n\n</think>\n\n{% endif %}<|im_start|>assistant\n"
    assert reasoning_style(gpt_oss).name == "harmony"
    assert reasoning_style(qwen3, "<|im_start|>assistant\n") == ReasoningStyle("think", open=False)
    assert reasoning_style(qwen3, "<|im_start|>assistant\n<think>\n") == ReasoningStyle("think", open=True)
    assert reasoning_style("{{ messages }}<|im_start|>assistant\n") is None


# --- through the server's response layer, with a scripted engine ------------------------------

class ScriptedAnswer:
    """generate() yields the given pieces of text, as the engine's model would."""

    n_ctx = 256
    prompt_caches = [None]
    n_parallel = 1

    def __init__(self, pieces: list[str]):
        self.pieces = pieces

    def generate(self, prompt, max_tokens=4, on_token=None, **options):
        result = GenerationResult(prompt_tokens=len(prompt))
        for i, piece in enumerate(self.pieces):
            on_token(100 + i, None)
            result.tokens.append(100 + i)
            yield piece
        result.text = "".join(self.pieces)
        result.finish_reason = "stop"
        return result


class PieceVocab:
    def token_to_piece(self, token, special):
        return b"?"


def run_job(pieces: list[str], stream: bool):
    engine = Engine(lambda: ScriptedAnswer(pieces), Metrics(), 4)
    engine.start()
    assert engine.wait_ready(5)
    responses = ChatResponses("m", "fp", PieceVocab(), False, reasoning=HARMONY)

    async def main():
        job = GenerationJob([1, 2, 3], {"max_tokens": 100})
        engine.submit(job)
        if stream:
            return [json.loads(c[len(b"data: "):]) for c in [c async for c in stream_job(job, responses, False)]
                    if c != b"data: [DONE]\n\n"]
        text = []
        while True:
            event = await job.next_event()
            if isinstance(event, Piece):
                text.append(event.text)
            elif isinstance(event, Finished):
                return responses.whole("".join(text), [], event)

    try:
        return asyncio.run(main())
    finally:
        engine.shutdown()


# gpt-oss's text as its tokens would come: markers whole, words split
GPT_OSS_PIECES = ["<|channel|>", "analysis", "<|message|>", "User", " asks", " 2+2.", " Answer: 4.", "<|end|>",
                  "<|start|>", "assistant", "<|channel|>", "final", "<|message|>", "2 + 2", " = **4**."]


def test_server_message_has_reasoning_content():
    body = run_job(GPT_OSS_PIECES, stream=False)
    message = body["choices"][0]["message"]
    assert message["reasoning_content"] == "User asks 2+2. Answer: 4."
    assert message["content"] == "2 + 2 = **4**."
    assert body["choices"][0]["finish_reason"] == "stop"


def test_server_stream_sends_reasoning_deltas_and_never_a_marker_in_content():
    chunks = run_job(GPT_OSS_PIECES, stream=True)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content", "") for d in deltas)
    assert reasoning == "User asks 2+2. Answer: 4."
    assert content == "2 + 2 = **4**."
    assert not any(m in d.get("content", "") for d in deltas for m in MARKERS)
    # reasoning streams as it comes, before any answer text
    first_content = next(i for i, d in enumerate(deltas) if d.get("content"))
    assert sum(1 for d in deltas[:first_content] if d.get("reasoning_content")) >= 3
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_a_model_without_reasoning_has_no_reasoning_content_key():
    responses = ChatResponses("m", "fp", PieceVocab(), False)
    result = GenerationResult(prompt_tokens=1)
    result.finish_reason = "stop"
    body = responses.whole("<think>x</think>y", [], Finished(result, [], 0.0, 0.0))
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "<think>x</think>y"}


def test_a_past_turns_reasoning_reaches_the_template_under_both_names():
    from edgeinfer.server.prompts import chat_messages
    from edgeinfer.server.schemas import ChatCompletionRequest

    req = ChatCompletionRequest(messages=[{"role": "user", "content": "2+2?"},
                                          {"role": "assistant", "content": "4", "reasoning_content": "Easy."},
                                          {"role": "user", "content": "And 3+3?"}])
    past = chat_messages(req)[1]
    assert past == {"role": "assistant", "content": "4", "reasoning_content": "Easy.", "thinking": "Easy."}
