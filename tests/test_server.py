"""`edgeinfer serve` as people use it: a real server process on loopback with the real SmolLM2
model, driven by the official `openai` client (and raw HTTP where the wire format matters)."""
from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

from support.api_errors import api_error
from support.server_process import ServerProcess

pytestmark = pytest.mark.realmodel

ALIAS = "smol"
N_CTX = 1024
MAX_TOKENS_LIMIT = 64   # the server's -n: keeps every request (and the fuzzer's) short
PARALLEL = 4            # the server's default --parallel


@pytest.fixture(scope="module")
def server(smollm2_path, tmp_path_factory):
    proc = ServerProcess(smollm2_path, "-c", str(N_CTX), "-n", str(MAX_TOKENS_LIMIT), "--alias", ALIAS,
                         "--max-body", str(1 << 20), log_path=tmp_path_factory.mktemp("server") / "server.log")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=60)


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def metric(server, name: str) -> float:
    for line in httpx.get(f"{server.url}/metrics").text.splitlines():
        if line.startswith(f"edgeinfer_{name} "):
            return float(line.split()[-1])
    raise KeyError(name)


# --- models and health ------------------------------------------------------------------------

def test_a_model_that_fails_to_load_stops_the_server(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(RuntimeError, match="exited with 1"):
        ServerProcess(bad, log_path=tmp_path / "server.log", timeout=30)
    assert "cannot load the model" in (tmp_path / "server.log").read_text()


def test_ctrl_c_ends_open_streams_with_an_error_event_and_exits(smollm2_path, tmp_path):
    import signal

    proc = ServerProcess(smollm2_path, "-c", "512", log_path=tmp_path / "server.log")
    try:
        body = {"prompt": "A long list of fruits: apple,", "max_tokens": 500, "stream": True,
                "logit_bias": {"0": -100, "2": -100}}
        with httpx.stream("POST", f"{proc.url}/v1/completions", json=body, timeout=30) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: {")
            proc.proc.send_signal(signal.SIGINT)
            rest = [line for line in lines if line.startswith("data: ")]
        assert json.loads(rest[-1][6:])["error"]["code"] == "shutting_down"
        assert proc.proc.wait(10) == 130   # the CLI's exit status for Ctrl-C
    finally:
        proc.stop()


def test_models_list_and_retrieve(client):
    assert [m.id for m in client.models.list().data] == [ALIAS]
    assert client.models.retrieve(ALIAS).id == ALIAS
    assert client.models.retrieve("smollm2").id == ALIAS   # the manifest's alias names it too
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("gpt-4")
    assert err.value.code == "model_not_found"


def test_health_and_unprefixed_routes(server):
    health = httpx.get(f"{server.url}/health").json()
    assert health["status"] == "ok"
    head = httpx.head(f"{server.url}/health")   # uptime monitors, curl -I
    assert head.status_code == 200 and head.content == b""
    # The default: 4 slots, each with the whole context; /v1/models says so too.
    assert (health["slots_total"], health["n_ctx_per_slot"]) == (PARALLEL, N_CTX) and health["slots_idle"] <= PARALLEL
    card = httpx.get(f"{server.url}/v1/models").json()["data"][0]
    assert (card["n_ctx"], card["parallel"]) == (N_CTX, PARALLEL)
    bare = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)   # base URL without /v1
    reply = bare.chat.completions.create(model=ALIAS, messages=ask("Hi"), max_tokens=2)
    assert reply.choices[0].message.content


# --- chat completions -------------------------------------------------------------------------

def test_chat_completion_is_the_library_answer(client, smollm2_path):
    from edgeinfer.model import Model

    messages = ask("What is the capital of France?")
    local = Model.load(smollm2_path, n_ctx=N_CTX, n_threads=1)
    expected = local.complete(local.chat_prompt(messages).ids, max_tokens=12, temperature=0).text
    reply = client.chat.completions.create(model=ALIAS, messages=messages, max_tokens=12, temperature=0)
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == expected
    assert choice.finish_reason in ("stop", "length")
    u = reply.usage
    assert u.prompt_tokens > 10 and 0 < u.completion_tokens <= 12
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.prompt_tokens_details.cached_tokens >= 0
    timings = reply.model_extra["timings"]
    assert timings["ttft_ms"] > 0 and timings["predicted_n"] == u.completion_tokens


def test_message_forms_reach_the_template(client):
    def prompt_tokens(messages, **kw) -> tuple[int, str]:
        reply = client.chat.completions.create(model=ALIAS, messages=messages, max_tokens=4, temperature=0, **kw)
        return reply.usage.prompt_tokens, reply.choices[0].message.content

    plain = prompt_tokens([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    # "developer" is the system role of newer OpenAI models; text parts are joined text.
    assert prompt_tokens([{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}]) == plain
    assert prompt_tokens([{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                          {"role": "user", "content": [{"type": "text", "text": "Hi"}]}]) == plain
    # A tool result is a turn of its own.
    with_tool = prompt_tokens([{"role": "user", "content": "Weather?"},
                               {"role": "assistant", "content": "Checking."},
                               {"role": "tool", "content": "Sunny, 21 C", "tool_call_id": "call_1"}])
    assert with_tool[0] > 10
    # stop as a single string
    text = plain[1]
    assert len(text) > 2 and text.find(text[1:3]) == 1
    assert prompt_tokens([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                         stop=text[1:3])[1] == text[:1]


def test_stream_matches_the_whole_response_and_ends_with_usage(client):
    messages = ask("Name three colours.")
    whole = client.chat.completions.create(model=ALIAS, messages=messages, max_tokens=16, temperature=0)
    chunks = list(client.chat.completions.create(model=ALIAS, messages=messages, max_tokens=16, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == whole.choices[0].finish_reason
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage.completion_tokens == whole.usage.completion_tokens
    assert usage_chunk.usage.prompt_tokens == whole.usage.prompt_tokens


def test_stream_without_include_usage_has_no_usage_chunk(client):
    chunks = list(client.chat.completions.create(model=ALIAS, messages=ask("Hi"), max_tokens=4, stream=True))
    assert all(c.choices for c in chunks) and all(c.usage is None for c in chunks)


def test_sse_wire_format(server):
    body = {"messages": ask("Say something in French with accents."), "max_tokens": 24, "stream": True,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = b"".join(r.iter_raw())
    events = raw.split(b"\n\n")
    assert events[-1] == b"" and events[-2] == b"data: [DONE]"
    payloads = [json.loads(e[len(b"data: "):]) for e in events[:-2]]
    assert all(e.startswith(b"data: ") for e in events[:-1])
    for p in payloads:   # every delta is whole UTF-8 text: no replacement characters
        for choice in p["choices"]:
            assert "\ufffd" not in (choice["delta"].get("content") or "")
    assert payloads[-1]["choices"] == [] and "usage" in payloads[-1] and "timings" in payloads[-1]
    assert all(p["usage"] is None for p in payloads[:-1])   # as OpenAI's, with include_usage


def test_stream_deltas_never_split_a_character(server):
    body = {"prompt": "Emoji row: " + "\U0001F642" * 8, "max_tokens": 12, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as r:
        payloads = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    deltas = [p["choices"][0]["text"] for p in payloads if p["choices"] and p["choices"][0]["text"]]
    n_tokens = payloads[-1]["usage"]["completion_tokens"]
    assert any(ord(c) > 0xFFFF for c in "".join(deltas))   # emoji were generated...
    assert len(deltas) < n_tokens                           # ...each from several tokens...
    assert all("\ufffd" not in d for d in deltas)           # ...and sent whole


def test_sampling_fields_are_honoured(server, client):
    # logit_bias: +100 on one token makes greedy decoding emit only it.
    token = httpx.post(f"{server.url}/tokenize", json={"content": " banana"}).json()["tokens"][0]
    reply = client.chat.completions.create(model=ALIAS, messages=ask("Hi"), max_tokens=3, temperature=0,
                                           logit_bias={str(token): 100})
    assert reply.choices[0].message.content == " banana" * 3
    # stop strings end the text before them; seeds make sampling reproducible.
    full = client.chat.completions.create(model=ALIAS, messages=ask("Describe a cat."), max_tokens=16,
                                          temperature=0).choices[0].message.content
    word = full.split()[3]
    stopped = client.chat.completions.create(model=ALIAS, messages=ask("Describe a cat."), max_tokens=16,
                                             temperature=0, stop=["never-seen", word])
    assert stopped.choices[0].message.content == full[:full.index(word)]
    assert stopped.choices[0].finish_reason == "stop"
    a, b = (client.chat.completions.create(model=ALIAS, messages=ask("Tell me a story."), max_tokens=12,
                                           temperature=1.0, seed=7, top_p=1.0, presence_penalty=0.5,
                                           frequency_penalty=0.5, extra_body={"top_k": 0, "min_p": 0.0})
            for _ in range(2))
    assert a.choices[0].message.content == b.choices[0].message.content


def test_logprobs(client):
    reply = client.chat.completions.create(model=ALIAS, messages=ask("Hi"), max_tokens=4, temperature=0,
                                           logprobs=True, top_logprobs=3)
    content = reply.choices[0].logprobs.content
    assert "".join(t.token for t in content) == reply.choices[0].message.content
    for t in content:   # greedy: the chosen token is the most likely one
        assert len(t.top_logprobs) == 3 and t.top_logprobs[0].token == t.token
        assert t.logprob <= 0 and t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob


# --- text completions -------------------------------------------------------------------------

def test_text_completion(client):
    reply = client.completions.create(model=ALIAS, prompt="The capital of France is", max_tokens=6, temperature=0)
    assert "Paris" in reply.choices[0].text and reply.usage.completion_tokens <= 6
    pieces = list(client.completions.create(model=ALIAS, prompt="The capital of France is", max_tokens=6,
                                            temperature=0, stream=True))
    assert "".join(p.choices[0].text for p in pieces) == reply.choices[0].text



def test_every_form_of_one_prompt_gives_the_same_answer(server):
    ids = httpx.post(f"{server.url}/tokenize", json={"content": "The capital of France is"}).json()["tokens"]
    texts = set()
    for prompt in ("The capital of France is", ["The capital of France is"], ids, [ids]):
        body = {"prompt": prompt, "max_tokens": 4, "temperature": 0}
        texts.add(httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).json()["choices"][0]["text"])
    assert len(texts) == 1


def test_null_is_an_option_left_out(server):
    # OpenAI's SDKs and many clients send their unset options as null.
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0,
            "n": None, "stream": None, "logprobs": None, "stream_options": None}
    reply = httpx.post(f"{server.url}/v1/chat/completions", json=chat, timeout=60)
    assert reply.status_code == 200 and reply.json()["object"] == "chat.completion"
    text = {"prompt": "Hi", "max_tokens": 2, "n": None, "stream": None, "echo": None, "logprobs": None}
    reply = httpx.post(f"{server.url}/v1/completions", json=text, timeout=60)
    assert reply.status_code == 200 and reply.json()["object"] == "text_completion"

# --- errors -----------------------------------------------------------------------------------

def test_prompt_over_the_context_is_context_length_exceeded(client):
    long_text = "word " * (N_CTX + 50)
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model=ALIAS, messages=ask(long_text), max_tokens=4, stream=stream)
        assert err.value.code == "context_length_exceeded"
        assert str(N_CTX) in err.value.message and "tokens" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=ALIAS, prompt=long_text, max_tokens=4)
    assert err.value.code == "context_length_exceeded" and err.value.param == "prompt"


def test_max_tokens_beyond_the_context_is_clamped_with_length(client):
    reply = client.completions.create(model=ALIAS, prompt="Once upon a time", max_tokens=100_000)
    assert reply.choices[0].finish_reason in ("length", "stop")
    assert reply.usage.completion_tokens <= MAX_TOKENS_LIMIT


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=ask("Hi"), max_tokens=2)


@pytest.mark.parametrize("body, param, code", [
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}, "max_tokens", "invalid_type"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": True}, "max_tokens", "invalid_type"),
    ({"messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream", "invalid_type"),
    ({"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": True}},
     "stream_options", "invalid_value"),
    ({"messages": [{"role": "user", "content": "x"}], "top_k": 2.5}, "top_k", "invalid_type"),
    ({"messages": [{"role": "user", "content": 7}]}, "messages.0.content", "invalid_type"),
    ({"messages": [{"role": "user", "content": "Hello \ud83d"}]}, "messages.0.content", "invalid_unicode"),
    ({"messages": [{"role": "system", "content": "\udc00 be brief"}, {"role": "user", "content": "x"}]},
     "messages.0.content", "invalid_unicode"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a\ud800"}]}]},
     "messages.0.content.0.text", "invalid_unicode"),
    ({"messages": [{"role": "user", "content": "x"}], "stop": ["\ud83d"]}, "stop.0", "invalid_unicode"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None,
      "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{"}}]}]},
     "messages.1.tool_calls.0.function.arguments", "invalid_value"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role", "invalid_value"),
    # A message without content before an assistant prefill (found by schemathesis: it was a 500).
    ({"messages": [{"role": "user"}, {"role": "assistant", "tool_calls": []}]}, "messages.0.content", "missing_field"),
    ({"messages": [{"role": "user"}]}, "messages.0.content", "missing_field"),
    ({"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": None}]},
     "messages.1.content", "missing_field"),
    ({"messages": [{"role": "assistant"}, {"role": "user", "content": "x"}]}, "messages.0.content", "missing_field"),
    ({"max_tokens": 3}, "messages", "missing_field"),
    ({"messages": []}, "messages", "invalid_value"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n", "not_supported"),
    ({"messages": [{"role": "user", "content": "x"}], "stop": ["a", 1]}, "stop.1", "invalid_type"),
    ({"messages": [{"role": "user", "content": [{"type": 5}]}]}, "messages.0.content.0.type", "invalid_type"),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}},
     "response_format.json_schema.schema", "missing_field"),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {
        "name": "ids", "schema": {"type": "array", "items": {"type": "integer"}, "contains": {"const": 1}}}}},
     "response_format", "invalid_schema"),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"},
      "grammar": 'root ::= "yes"'}, "grammar", "invalid_value"),
    # JSON Schema's `false` allows no value; integers beyond 64 bits are more than llguidance reads.
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {
        "name": "none", "schema": False}}}, "response_format", "invalid_schema"),
    ({"messages": [{"role": "user", "content": "x"}], "json_schema": False}, "json_schema", "invalid_schema"),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {
        "name": "big", "schema": {"enum": [10 ** 30]}}}}, "response_format", "invalid_schema"),
    ({"messages": [{"role": "user", "content": "x"}], "grammar": "root ::= ("}, "grammar", "invalid_grammar"),
    ({"messages": [{"role": "user", "content": "x"}], "grammar": ""}, "grammar", "invalid_grammar"),
    ({"messages": [{"role": "user", "content": "x"}], "grammar": 'root ::= "x" y'}, "grammar", "invalid_grammar"),
    ({"messages": [{"role": "user", "content": "x"}], "grammar": "root ::= root"}, "grammar", "invalid_grammar"),
    ({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"abc": 1}}, "logit_bias", "invalid_value"),
    ({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"\u00b2": 1}}, "logit_bias", "invalid_value"),
    ({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"999999": 1}}, "logit_bias", "invalid_value"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages", "invalid_value"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": 9}, "temperature", "invalid_value"),
    ({"messages": [{"role": "user", "content": "x"}], "modalities": ["text", "audio"]}, "modalities", "not_supported"),
    ({"messages": [{"role": "user", "content": "x"}], "audio": {"voice": "alloy", "format": "wav"}},
     "audio", "not_supported"),
])
def test_invalid_requests_are_400_naming_the_field(server, body, param, code):
    # json.dumps escapes lone surrogates as \\uXXXX, as a JavaScript front end's JSON.stringify does.
    r = httpx.post(f"{server.url}/v1/chat/completions", content=json.dumps(body),
                   headers={"content-type": "application/json"}, timeout=30)
    api_error(r, param=param, code=code, type="invalid_request_error")


@pytest.mark.parametrize("path, raw, param", [
    ("/v1/completions", '{"prompt": "Hello \\ud83d", "max_tokens": 2}', "prompt"),
    ("/v1/completions", '{"prompt": ["\\ud83d"], "max_tokens": 2}', "prompt.0"),
    ("/tokenize", '{"content": "Hello \\ud83d"}', "content"),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "x", "name": "\\udfff"}]}', "messages.0.name"),
])
def test_lone_surrogates_are_400_on_every_endpoint(server, path, raw, param):
    r = httpx.post(f"{server.url}{path}", content=raw, headers={"content-type": "application/json"}, timeout=30)
    assert "surrogate" in api_error(r, code="invalid_unicode", param=param)["message"]


CITY = {"type": "object", "required": ["city", "population"], "additionalProperties": False,
        "properties": {"city": {"type": "string", "maxLength": 16}, "population": {"type": "integer", "minimum": 0}}}


def test_response_format_json_schema_and_json_object_are_enforced(client):
    import jsonschema

    for seed in (1, 2):
        reply = client.chat.completions.create(
            model=ALIAS, messages=ask("What is the largest city of France?"), temperature=0.7, seed=seed,
            response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}})
        assert reply.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(reply.choices[0].message.content), CITY)
    reply = client.chat.completions.create(model=ALIAS, messages=ask("Describe a cat as JSON."), temperature=0,
                                           max_tokens=48, response_format={"type": "json_object"})
    text = reply.choices[0].message.content
    assert text.startswith("{") and "<|im_end|>" not in text
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)


def test_json_schema_true_and_bounds_past_the_digit_bound_are_enforced(client):
    """`true` is any JSON value; a bound further out than the digit bound gives way to it (llguidance
    cannot compile it, and would not even read an integer past 64 bits)."""
    import jsonschema

    for schema in (True, {"type": "integer", "minimum": -10 ** 30}, {"type": "number", "maximum": 1e30}):
        reply = client.chat.completions.create(
            model=ALIAS, messages=ask("Give me a number."), temperature=0, max_tokens=32, modalities=["text"],
            response_format={"type": "json_schema", "json_schema": {"name": "any", "schema": schema}})
        assert reply.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(reply.choices[0].message.content), schema)


def test_llamacpp_json_schema_and_gbnf_grammar_fields(server):
    body = {"prompt": "Is the sky blue? Answer:", "max_tokens": 8, "temperature": 0.7, "seed": 3,
            "grammar": 'root ::= " yes" | " no"'}
    reply = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).json()
    assert reply["choices"][0]["text"] in (" yes", " no") and reply["choices"][0]["finish_reason"] == "stop"
    body = {"prompt": "The largest city of France, as JSON:", "max_tokens": 40, "temperature": 0, "json_schema": CITY}
    reply = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).json()
    assert json.loads(reply["choices"][0]["text"])["population"] >= 0


def test_a_grammar_past_the_matchers_limits_is_a_400_not_a_500(server):
    # It compiles, and fails at its first forced tokens: llguidance's 50000-item limit. Sent
    # again it fails again, so it is the request's error.
    schema = {"type": "array", "items": {"const": 1}, "minItems": 50000, "maxItems": 50000}
    r = httpx.post(f"{server.url}/v1/completions", json={"prompt": "Ones:", "max_tokens": 4, "json_schema": schema},
                   timeout=60)
    assert "Too many items" in api_error(r, code="invalid_schema")["message"]


def test_non_finite_numbers_are_refused_naming_the_field(server):
    for raw, param in (('{"prompt": "Hi", "temperature": NaN}', "temperature"),
                       ('{"prompt": "Hi", "top_p": Infinity}', "top_p"),
                       ('{"prompt": "Hi", "logit_bias": {"5": -Infinity}}', "logit_bias.5")):
        r = httpx.post(f"{server.url}/v1/completions", content=raw, headers={"content-type": "application/json"})
        assert "finite" in api_error(r, param=param)["message"]


def test_every_answer_is_counted_by_status(server):
    def count(status: int) -> float:
        try:
            return metric(server, f'http_responses_total{{status="{status}"}}')
        except KeyError:
            return 0

    before_400, before_404 = count(400), count(404)
    httpx.post(f"{server.url}/v1/completions", content=b"{", headers={"content-type": "application/json"})
    httpx.get(f"{server.url}/v1/nowhere")
    assert count(400) == before_400 + 1 and count(404) == before_404 + 1


def test_malformed_bodies(server):
    url = f"{server.url}/v1/chat/completions"
    for raw in (b'{"messages": [', b"", b"[1, 2]", b"null", b"\xff\xfe", b'{"messages": "\xff"}', b"[" * 100_000):
        r = httpx.post(url, content=raw, headers={"content-type": "application/json"})
        assert api_error(r, type="invalid_request_error")["code"] in ("invalid_json", "invalid_body"), (raw, r.text)
    too_big = json.dumps({"messages": ask("x" * (1 << 20))})
    r = httpx.post(url, content=too_big, headers={"content-type": "application/json"})
    api_error(r, 413, code="request_too_large")
    # Unknown fields are ignored; a body sent without a JSON content type is still read as JSON.
    r = httpx.post(url, content=json.dumps({"messages": ask("Hi"), "max_tokens": 2, "frobnicate": True}),
                   headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 200, r.text


def test_tokenize_and_detokenize(server):
    ids = httpx.post(f"{server.url}/tokenize", json={"content": "Hello world"}).json()["tokens"]
    assert httpx.post(f"{server.url}/detokenize", json={"tokens": ids}).json()["content"] == "Hello world"
    r = httpx.post(f"{server.url}/v1/detokenize", json={"tokens": [10**9]})
    api_error(r, param="tokens")
    # As llama-server's: special tokens as their text; pieces on request, bytes where not whole UTF-8.
    special = httpx.post(f"{server.url}/tokenize", json={"content": "<|im_start|>Hi", "parse_special": True}).json()
    assert httpx.post(f"{server.url}/detokenize", json=special).json()["content"] == "<|im_start|>Hi"
    pieces = httpx.post(f"{server.url}/tokenize", json={"content": "Hello world \U0001F642",
                                                         "with_pieces": True}).json()["tokens"]
    assert pieces[0] == {"id": ids[0], "piece": "Hello"} and pieces[1]["piece"] == " world"
    assert bytes(b for p in pieces[2:] for b in (p["piece"] if isinstance(p["piece"], list)
                                                 else p["piece"].encode())) == " \U0001F642".encode()


def test_openapi_schema_is_served(server):
    schema = httpx.get(f"{server.url}/openapi.json").json()
    assert {"/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/models/{model_id}", "/v1/health",
            "/v1/metrics", "/v1/tokenize", "/v1/detokenize"} <= set(schema["paths"])


# --- prompt cache, concurrency, cancellation ----------------------------------------------------

def test_second_turn_reuses_the_first_from_the_prompt_cache(client):
    system = ("You are a patient assistant for a museum of natural history. " +
              "Visitors ask about fossils, minerals, meteorites and the animals of the ice age. " * 20 +
              f"Session {time.time_ns()}.")   # unique, so the first turn starts cold
    turn1 = [{"role": "system", "content": system}, {"role": "user", "content": "Where are the mammoths?"}]
    first = client.chat.completions.create(model=ALIAS, messages=turn1, max_tokens=16, temperature=0)
    turn2 = turn1 + [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "And the meteorites?"}]
    second = client.chat.completions.create(model=ALIAS, messages=turn2, max_tokens=16, temperature=0)
    t1, t2 = first.model_extra["timings"], second.model_extra["timings"]
    assert first.usage.prompt_tokens > 300 and first.usage.prompt_tokens_details.cached_tokens < 50
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens
    assert t2["prompt_ms"] < t1["prompt_ms"] / 4 and t2["ttft_ms"] < t1["ttft_ms"] / 2
    print(f"\nturn 1: {first.usage.prompt_tokens} prompt tokens, prompt {t1['prompt_ms']:.0f} ms, "
          f"TTFT {t1['ttft_ms']:.0f} ms; turn 2: {second.usage.prompt_tokens_details.cached_tokens} cached, "
          f"prompt {t2['prompt_ms']:.0f} ms, TTFT {t2['ttft_ms']:.0f} ms")


def stream_chat(server, prompt: str, max_tokens: int, **extra) -> dict:
    """One streamed chat request on its own client: its text, finish reason, usage and the
    times of its first and last pieces."""
    own = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=60)
    out: dict = {"text": []}
    for chunk in own.chat.completions.create(model=ALIAS, messages=ask(prompt), max_tokens=max_tokens,
                                             stream=True, stream_options={"include_usage": True}, **extra):
        if chunk.choices and chunk.choices[0].delta.content:
            out["text"].append(chunk.choices[0].delta.content)
            out.setdefault("first", time.perf_counter())
        if chunk.choices and chunk.choices[0].finish_reason:
            out["finish"] = chunk.choices[0].finish_reason
            out["last"] = time.perf_counter()
        if chunk.usage:
            out["usage"] = chunk.usage
    out["text"] = "".join(out["text"])
    return out


def test_concurrent_streams_are_correct_complete_and_independent(server, client):
    """Twice as many streams as slots at once: each answer is the one the request gets alone
    (greedy), complete, with its own usage; they run side by side, the rest wait for a slot."""
    n = 2 * PARALLEL
    prompts = [f"Write the number {i} in words, then count from 1 to {i + 3}." for i in range(n)]
    expected = [client.chat.completions.create(model=ALIAS, messages=ask(p), max_tokens=24, temperature=0)
                for p in prompts]
    results: list[dict] = [{} for _ in range(n)]

    def run(i: int) -> None:
        results[i] = stream_chat(server, prompts[i], 24, temperature=0)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    started = time.perf_counter()   # the HTTP side answers while the engine works
    assert httpx.get(f"{server.url}/health").status_code == 200
    assert time.perf_counter() - started < 0.5
    for t in threads:
        t.join(120)
    for got, want in zip(results, expected):
        assert got["text"] == want.choices[0].message.content and got["finish"] == want.choices[0].finish_reason
        assert got["usage"].completion_tokens == want.usage.completion_tokens
        assert got["usage"].prompt_tokens == want.usage.prompt_tokens
    # Side by side: some stream began before another one ended.
    assert any(a["first"] < b["last"] and b["first"] < a["last"]
               for i, a in enumerate(results) for b in results[i + 1:])
    assert metric(server, "requests_in_flight") == 0 and metric(server, "queue_depth") == 0
    assert metric(server, "decode_step_rows_total") > metric(server, "decode_steps_total")   # shared steps


def test_a_slot_freed_by_a_disconnect_is_reused_while_the_others_stream(server):
    """Every slot busy with a long answer; one client leaves; a new request gets its slot and
    finishes while the other long answers are still streaming."""
    long_body = {"prompt": "Here is a very long list of fruits: apple, pear,", "max_tokens": MAX_TOKENS_LIMIT,
                 "temperature": 1.0, "logit_bias": {"2": -100, "0": -100}, "stream": True}   # no end-of-text
    ends: dict[int, float] = {}

    def long_stream(i: int) -> None:
        with httpx.stream("POST", f"{server.url}/v1/completions", json=long_body, timeout=60) as r:
            for _ in r.iter_lines():
                pass
        ends[i] = time.perf_counter()

    others = [threading.Thread(target=long_stream, args=(i,)) for i in range(PARALLEL - 1)]
    for t in others:
        t.start()
    with httpx.stream("POST", f"{server.url}/v1/completions", json=long_body, timeout=60) as r:
        lines = r.iter_lines()
        for _ in range(4):
            next(lines)
        deadline = time.monotonic() + 10
        while metric(server, 'slot_busy{slot="0"}') + sum(
                metric(server, f'slot_busy{{slot="{i}"}}') for i in range(1, PARALLEL)) < PARALLEL:
            assert time.monotonic() < deadline, "the long answers never filled every slot"
            time.sleep(0.01)
    reply = stream_chat(server, "Say hi.", 4, temperature=0)   # the dropped stream's slot
    assert reply["text"] and reply["finish"]
    for t in others:
        t.join(120)
    assert len(ends) == PARALLEL - 1 and reply["last"] < min(ends.values())


def test_client_dropped_mid_stream_cancels_its_generation(server, client):
    cancelled_before = metric(server, 'requests_total{outcome="cancelled"}')
    body = {"prompt": "Here is a very long list of fruits: apple, pear,", "max_tokens": MAX_TOKENS_LIMIT,
            "temperature": 1.0, "logit_bias": {"2": -100, "0": -100}, "stream": True}   # no end-of-text
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(6)]   # 3 chunks (data line + blank line each)
        assert all(g.startswith("data: ") or g == "" for g in got)
    dropped = time.perf_counter()
    while True:   # the engine notices at its next decode step
        if metric(server, 'requests_total{outcome="cancelled"}') > cancelled_before:
            break
        assert time.perf_counter() - dropped < 0.5, "the generation went on after its client left"
        time.sleep(0.01)
    reply = client.chat.completions.create(model=ALIAS, messages=ask("Hi"), max_tokens=4, temperature=0)
    assert reply.choices[0].message.content and reply.model_extra["timings"]["queue_ms"] < 500


def test_client_gone_before_a_whole_response_cancels_it(server):
    before = metric(server, 'requests_total{outcome="cancelled"}')
    body = {"prompt": "A long list of animals: cat, dog,", "max_tokens": MAX_TOKENS_LIMIT,
            "logit_bias": {"2": -100, "0": -100}}
    with pytest.raises(httpx.ReadTimeout):   # the client gives up and closes the connection
        httpx.post(f"{server.url}/v1/completions", json=body, timeout=httpx.Timeout(60, read=0.15))
    gone = time.perf_counter()
    while metric(server, 'requests_total{outcome="cancelled"}') == before:
        assert time.perf_counter() - gone < 0.5, "the generation went on after its client left"
        time.sleep(0.01)


def test_metrics_are_prometheus_text(server):
    r = httpx.get(f"{server.url}/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    names = {line.split()[2] for line in r.text.splitlines() if line.startswith("# TYPE")}
    assert {"edgeinfer_prompt_tokens_total", "edgeinfer_generated_tokens_total", "edgeinfer_requests_in_flight",
            "edgeinfer_queue_depth", "edgeinfer_prompt_cache_hit_tokens_total",
            "edgeinfer_generation_tokens_per_second"} <= names
    assert metric(server, "generated_tokens_total") > 0 and metric(server, "prompt_cache_hit_tokens_total") > 0


def test_metrics_count_speculative_guesses(server, client):
    before = metric(server, "draft_tokens_total"), metric(server, "draft_tokens_accepted_total")
    words = "one two three four five six seven eight nine ten eleven twelve"
    r = client.chat.completions.create(model=ALIAS, temperature=0, max_tokens=40,
                                       messages=[{"role": "user", "content": f"Repeat exactly: {words} {words}"}])
    assert r.choices[0].message.content
    drafted = metric(server, "draft_tokens_total") - before[0]
    accepted = metric(server, "draft_tokens_accepted_total") - before[1]
    assert drafted > 0 and 0 < accepted <= drafted
    timings = r.model_extra["timings"]   # the request's own counts, llama.cpp's names
    assert (timings["draft_n"], timings["draft_n_accepted"]) == (drafted, accepted)


def test_a_draft_model_gives_the_plain_answer_with_its_guesses_counted(server, client, smollm2_path, tmp_path):
    """--draft (here the model itself: the same vocabulary, every guess right): the greedy answer
    is the one the server without a draft gives, and /metrics counts the guesses."""
    messages = [{"role": "user", "content": "Write a short poem about autumn leaves."}]
    want = client.chat.completions.create(model=ALIAS, messages=messages, max_tokens=40, temperature=0)
    drafted = ServerProcess(smollm2_path, "-c", "512", "-np", "2", "--draft", str(smollm2_path),
                            log_path=tmp_path / "draft.log")
    try:
        own = openai.OpenAI(base_url=f"{drafted.url}/v1", api_key="x", max_retries=0, timeout=60)
        got = own.chat.completions.create(model="smollm2", messages=messages, max_tokens=40, temperature=0)
        assert got.choices[0].message.content == want.choices[0].message.content
        assert metric(drafted, "draft_tokens_accepted_total") > 0
    finally:
        drafted.stop()


def test_a_draft_model_of_another_vocabulary_stops_the_server_with_the_reason(smollm2_path, gemma3_path, tmp_path):
    with pytest.raises(RuntimeError, match="exited with 1"):
        ServerProcess(smollm2_path, "--draft", str(gemma3_path), log_path=tmp_path / "server.log", timeout=60)
    log = " ".join((tmp_path / "server.log").read_text().split())
    assert "cannot load the model" in log and "vocabularies differ" in log


# --- API key and the prompt cache on disk ---------------------------------------------------------

KEY = "sk-test-123"


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("prompt-cache")


@pytest.fixture(scope="module")
def keyed_server(smollm2_path, cache_dir, tmp_path_factory):
    proc = ServerProcess(smollm2_path, "-c", "512", "-n", "8", "--api-key", KEY, "--prompt-cache-dir",
                         str(cache_dir), "--prompt-cache-min", "32",
                         log_path=tmp_path_factory.mktemp("keyed") / "server.log")
    yield proc
    proc.stop()


def test_api_key_is_required_except_for_health(keyed_server):
    wrong = openai.OpenAI(base_url=f"{keyed_server.url}/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as err:
        wrong.chat.completions.create(model="smollm2", messages=ask("Hi"), max_tokens=2)
    assert err.value.code == "invalid_api_key"
    assert httpx.get(f"{keyed_server.url}/v1/models").status_code == 401
    assert httpx.get(f"{keyed_server.url}/health").status_code == 200
    assert httpx.get(f"{keyed_server.url}/v1/models", headers={"X-Api-Key": KEY}).status_code == 200
    right = openai.OpenAI(base_url=f"{keyed_server.url}/v1", api_key=KEY, max_retries=0)
    assert right.chat.completions.create(model="smollm2", messages=ask("Hi"), max_tokens=2).choices


def test_max_tokens_past_the_context_end_is_clamped_with_length(keyed_server):
    client = openai.OpenAI(base_url=f"{keyed_server.url}/v1", api_key=KEY, max_retries=0)
    prompt = [1] + [28120, 905] * 254   # 509 token ids: 3 positions of the 512-token context remain
    reply = client.completions.create(model="smollm2", prompt=prompt, max_tokens=100,
                                      logit_bias={"0": -100, "2": -100})   # no end-of-text
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.prompt_tokens == 509 and reply.usage.completion_tokens == 512 - 509 + 1


def _wait_for_files(folder, n: int, timeout: float = 10.0) -> list:
    """The state files once there are `n` (they are written just after the answer goes out)."""
    deadline = time.monotonic() + timeout
    while len(files := sorted(folder.rglob("*.eistate"))) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return files


def test_send_restart_send_reuses_the_system_prompt_and_the_conversation(smollm2_path, tmp_path):
    """The prompt cache folder after one request holds its system prefix; after a clean restart,
    the same system prompt and the whole last conversation come from it."""
    folder = tmp_path / "states"
    system = "You answer questions about the solar system, briefly and precisely. " * 6
    question = [{"role": "system", "content": system}, {"role": "user", "content": "How many moons has Mars?"}]

    def start(name: str) -> ServerProcess:
        return ServerProcess(smollm2_path, "-c", "512", "-n", "8", "--prompt-cache-dir", str(folder),
                             log_path=tmp_path / f"{name}.log")

    def chat(proc: ServerProcess, messages: list[dict]):
        c = openai.OpenAI(base_url=f"{proc.url}/v1", api_key="unused", max_retries=0)
        return c.chat.completions.create(model="smollm2", max_tokens=4, temperature=0, messages=messages)

    first = start("first")
    try:
        answer = chat(first, question)
        assert answer.usage.prompt_tokens_details.cached_tokens == 0
        assert len(_wait_for_files(folder, 1)) == 1        # the system prefix, after one request
    finally:
        first.stop()                                       # a clean stop saves the conversation too
    assert len(_wait_for_files(folder, 2)) == 2
    second = start("second")
    try:
        other = chat(second, [question[0], {"role": "user", "content": "Which planet has rings?"}])
        assert other.usage.prompt_tokens_details.cached_tokens > 60   # the system prompt
        follow_up = question + [{"role": "assistant", "content": answer.choices[0].message.content},
                                {"role": "user", "content": "And Jupiter?"}]
        again = chat(second, follow_up)
        # Everything up to the end of the first answer came from the saved conversation.
        assert again.usage.prompt_tokens_details.cached_tokens >= answer.usage.prompt_tokens + 1
    finally:
        second.stop()


# --- fuzzing against the OpenAPI schema --------------------------------------------------------------

def test_schemathesis_finds_no_server_errors(server):
    """A bounded property-based pass (valid and invalid bodies from the published schema) over the
    endpoints that take input: nothing may answer 5xx, and every answer has a documented status,
    content type and body shape."""
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings, strategies as st
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,
                                                   status_code_conformance)

    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json").include(
        path_regex=r"^/v1/(chat/completions|completions|tokenize|detokenize|models/\{model_id\})$")
    cases = st.one_of(schema.as_strategy(generation_mode=schemathesis.GenerationMode.POSITIVE),
                      schema.as_strategy(generation_mode=schemathesis.GenerationMode.NEGATIVE))
    seen: dict[int, int] = {}
    started = time.monotonic()

    @settings(max_examples=100, deadline=None, database=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=cases)
    def check(case):
        if time.monotonic() - started > 60:   # a hard bound on the CI budget
            return
        response = case.call(base_url=server.url, timeout=60)
        seen[response.status_code] = seen.get(response.status_code, 0) + 1
        case.validate_response(response, checks=[not_a_server_error, status_code_conformance,
                                                 content_type_conformance, response_schema_conformance])

    check()
    assert sum(seen.values()) >= 20 and any(code < 300 for code in seen) and any(code >= 400 for code in seen)
    print(f"\nschemathesis: status codes {dict(sorted(seen.items()))} in {time.monotonic() - started:.0f} s")
