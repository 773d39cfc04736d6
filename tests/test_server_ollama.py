"""Ollama's API (/api/chat, /api/generate, /api/tags, /api/show, /api/ps, /api/version) driven by
the `ollama` client from PyPI against `edgeinfer serve` over a models folder holding SmolLM2 and a
tiny random model: answers whole and streamed (NDJSON) agree, `format` json and schema follow
the same constrained decoding as response_format, `options` reach the sampler, `keep_alive` loads
and unloads, tool calls come back as Ollama's objects, a reasoning model's thinking goes to
`thinking` (or is dropped with think false), and errors are Ollama's {"error": ...}."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import httpx
import pytest

ollama = pytest.importorskip("ollama")

from edgeinfer.reasoning import ReasoningStyle  # noqa: E402
from edgeinfer.catalog import get_entry  # noqa: E402
from edgeinfer.server.ollama import OllamaAnswer, chat_request, check_think, digest, generate_request  # noqa: E402
from edgeinfer.server.ollama_schemas import OllamaChatRequest, OllamaGenerateRequest  # noqa: E402
from edgeinfer.server.worker import Finished  # noqa: E402
from edgeinfer.generate import GenerationResult  # noqa: E402
from edgeinfer.server.errors import APIError  # noqa: E402
from edgeinfer.server.served_models import folder_models, single_model  # noqa: E402
from edgeinfer.tools.formats import HERMES  # noqa: E402
from support.server_process import ServerProcess  # noqa: E402
from support.tiny_llama import TinyConfig, write_tiny_llama  # noqa: E402

SMOL = "smollm2-135m-instruct"
GREEDY = {"temperature": 0, "num_predict": 12}
QUESTION = [{"role": "user", "content": "Name a color."}]


# --- the translation, without a server -----------------------------------------------------------

def test_options_and_format_become_the_openai_fields():
    req = chat_request(OllamaChatRequest(model="m", messages=QUESTION, format={"type": "object"},
                                         options={"temperature": 0.2, "top_k": 5, "num_predict": 7, "stop": ["x"],
                                                  "seed": 3, "num_gpu": 99, "mirostat": 0}))
    assert (req.temperature, req.top_k, req.max_tokens, req.stop, req.seed) == (0.2, 5, 7, ["x"], 3)
    assert req.response_format.type == "json_schema" and req.response_format.json_schema.schema_ == {"type": "object"}
    assert chat_request(OllamaChatRequest(model="m", messages=QUESTION, format="json")).response_format.type == \
        "json_object"
    unlimited = chat_request(OllamaChatRequest(model="m", messages=QUESTION, options={"num_predict": -1}))
    assert unlimited.max_tokens is None


def test_generate_is_templated_unless_raw():
    templated = generate_request(OllamaGenerateRequest(model="m", prompt="hi", system="be brief"))
    assert [(m.role, m.content) for m in templated.messages] == [("system", "be brief"), ("user", "hi")]
    raw = generate_request(OllamaGenerateRequest(model="m", prompt="<s>hi", raw=True))
    assert raw.prompt == "<s>hi"


def test_tool_results_answer_their_calls_by_name():
    req = chat_request(OllamaChatRequest(model="m", messages=[
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "tool_calls": [{"function": {"name": "weather", "arguments": {"city": "Oslo"}}},
                                             {"function": {"name": "time", "arguments": {}}}]},
        {"role": "tool", "tool_name": "time", "content": "noon"},
        {"role": "tool", "tool_name": "weather", "content": "rain"}]))
    calls = req.messages[1].tool_calls
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Oslo"}
    assert req.messages[2].tool_call_id == calls[1]["id"] and req.messages[3].tool_call_id == calls[0]["id"]


@pytest.mark.parametrize("body, field", [
    ({"messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}, "messages.0.images"),
    ({"messages": QUESTION, "think": "extreme"}, "think"),
    # Within the engine's range but not OpenAI's, which the request it becomes has: named as sent.
    ({"messages": QUESTION, "options": {"temperature": 3}}, "'options.temperature'"),
    ({"messages": QUESTION, "options": {"stop": ["s"] * 17}}, "'options.stop'"),
])
def test_what_would_change_the_answer_is_refused_by_name(body, field):
    with pytest.raises(APIError) as e:
        chat_request(OllamaChatRequest(model="m", **body))
    assert e.value.status == 400 and field in e.value.message


def test_tool_calls_are_sent_whole_as_objects():
    answer = OllamaAnswer("chat", "m:latest", HERMES, 0.0, 0.0)
    text = 'Let me check.<tool_call>\n{"name": "weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    lines = [line for i in range(0, len(text), 7) for line in answer.piece(text[i:i + 7])]
    result = GenerationResult(prompt_tokens=3)
    result.finish_reason = "stop"
    lines += answer.final(Finished(result, [], 1.0, 0.0))
    assert "".join(line["message"]["content"] for line in lines) == "Let me check."
    calls = [c for line in lines for c in line["message"].get("tool_calls", [])]
    assert calls == [{"function": {"name": "weather", "arguments": {"city": "Oslo"}}}]
    assert lines[-1]["done"] is True and lines[-1]["done_reason"] == "stop"


HARMONY_ANSWER = ["<|channel|>", "analysis", "<|message|>", "Hm,", " red.", "<|end|>", "<|start|>", "assistant",
                  "<|channel|>", "final", "<|message|>", "Red", "."]


def finished() -> Finished:
    result = GenerationResult(prompt_tokens=3)
    result.finish_reason = "stop"
    return Finished(result, [], 1.0, 0.0)


@pytest.mark.parametrize("think", [None, True, "high"])
def test_thinking_goes_to_its_own_field_streamed_and_whole(think):
    harmony = ReasoningStyle("harmony")
    answer = OllamaAnswer("chat", "m:latest", None, 0.0, 0.0, harmony, think)
    lines = [line for piece in HARMONY_ANSWER for line in answer.piece(piece)] + answer.final(finished())
    assert "".join(line["message"].get("thinking", "") for line in lines) == "Hm, red."
    assert "".join(line["message"]["content"] for line in lines) == "Red."
    first_content = next(i for i, line in enumerate(lines) if line["message"]["content"])
    assert all("thinking" in line["message"] for line in lines[:first_content])
    whole = OllamaAnswer("generate", "m:latest", None, 0.0, 0.0, harmony, think).whole("".join(HARMONY_ANSWER),
                                                                                      finished())
    assert (whole["thinking"], whole["response"]) == ("Hm, red.", "Red.")


def test_think_false_keeps_the_reasoning_out_and_asks_the_template_not_to_think():
    think = ReasoningStyle("think")
    answer = OllamaAnswer("chat", "m:latest", None, 0.0, 0.0, think, False)
    lines = answer.piece("<think>Hm.</think>Red.") + answer.final(finished())
    assert all("thinking" not in line["message"] for line in lines)
    assert "".join(line["message"]["content"] for line in lines) == "Red."
    assert chat_request(OllamaChatRequest(model="m", messages=QUESTION, think=False)).chat_template_kwargs == \
        {"enable_thinking": False}
    assert chat_request(OllamaChatRequest(model="m", messages=QUESTION, think="low")).chat_template_kwargs == \
        {"reasoning_effort": "low"}
    assert chat_request(OllamaChatRequest(model="m", messages=QUESTION, think=True)).chat_template_kwargs is None


def test_thinking_asked_of_a_model_that_does_not_reason_is_refused():
    check_think(None, None, "m:latest")
    check_think(False, None, "m:latest")
    check_think(True, ReasoningStyle("think"), "m:latest")
    with pytest.raises(APIError) as e:
        check_think(True, None, "m:latest")
    assert e.value.status == 400 and e.value.message == '"m:latest" does not support thinking'


# --- the real server, the real client ------------------------------------------------------------

@pytest.fixture(scope="module")
def server(smollm2_path, tmp_path_factory, request):
    folder = tmp_path_factory.mktemp("ollama-models")
    (folder / smollm2_path.name).symlink_to(smollm2_path)
    write_tiny_llama(folder / "tiny.gguf", TinyConfig(), chat_template="{% for m in messages %}{{ m.content }}"
                                                                       "{% endfor %}")
    mp = pytest.MonkeyPatch()
    mp.setenv("EDGEINFER_MODELS_DIR", str(folder))
    proc = ServerProcess(None, "-c", "512", "-np", "2", log_path=folder / "server.log")
    request.addfinalizer(lambda: (proc.stop(), mp.undo()))
    return proc


@pytest.fixture(scope="module")
def client(server):
    return ollama.Client(host=server.url)


def post_raw(server, path: str, body: dict) -> httpx.Response:
    """`body` as JavaScript's JSON.stringify sends it: a lone surrogate escaped as \\uXXXX."""
    return httpx.post(f"{server.url}{path}", content=json.dumps(body), headers={"content-type": "application/json"},
                      timeout=60)


SURROGATE = "Hello \ud83d"
TINY_CHAT = {"model": "tiny", "messages": QUESTION}
TINY_PROMPT = {"model": "tiny", "prompt": "Name a color."}


@pytest.mark.realmodel
@pytest.mark.parametrize("path, body, field", [
    # a value of the wrong type, not converted (as Ollama's Go decoder and its options refuse it)
    ("/api/chat", TINY_CHAT | {"stream": "false"}, "stream"),
    ("/api/chat", TINY_CHAT | {"stream": 1}, "stream"),
    ("/api/generate", TINY_PROMPT | {"raw": "yes"}, "raw"),
    ("/api/chat", TINY_CHAT | {"options": {"num_predict": True}}, "options.num_predict"),
    ("/api/chat", TINY_CHAT | {"options": {"num_predict": "5"}}, "options.num_predict"),
    ("/api/chat", TINY_CHAT | {"options": {"num_predict": -3}}, "options.num_predict"),
    ("/api/chat", TINY_CHAT | {"options": {"temperature": -1}}, "options.temperature"),
    ("/api/generate", TINY_PROMPT | {"options": {"num_ctx": "big"}}, "options.num_ctx"),
    ("/api/generate", TINY_PROMPT | {"options": {"num_ctx": -1}}, "options.num_ctx"),
    ("/api/generate", TINY_PROMPT | {"options": {"num_ctx": 1e8}}, "options.num_ctx"),
    ("/api/generate", TINY_PROMPT | {"options": {"num_thread": "4"}}, "options.num_thread"),
    # text with no UTF-8 encoding, named where it is
    ("/api/generate", {"model": "tiny", "prompt": SURROGATE}, "prompt"),
    ("/api/generate", TINY_PROMPT | {"system": SURROGATE}, "system"),
    ("/api/generate", TINY_PROMPT | {"options": {"stop": ["ok", SURROGATE]}}, "options.stop.1"),
    ("/api/chat", {"model": "tiny", "messages": [{"role": "user", "content": SURROGATE}]}, "messages.0.content"),
    ("/api/chat", TINY_CHAT | {"format": {"type": "string", "description": SURROGATE}}, "format.description"),
])
def test_wrong_types_and_bad_text_are_400_naming_the_field(server, path, body, field):
    r = post_raw(server, path, body)
    assert r.status_code == 400 and f"'{field}'" in r.json()["error"], r.text


@pytest.mark.realmodel
def test_a_null_stream_streams_as_ollamas_does(server):
    r = post_raw(server, "/api/generate", TINY_PROMPT | {"stream": None, "options": {"num_predict": 3}})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    assert json.loads(r.text.splitlines()[-1])["done"] is True


@pytest.mark.realmodel
def test_unused_runner_options_of_the_right_type_are_accepted(server):
    options = {"num_predict": 2, "num_ctx": 100_000, "num_gpu": 99, "use_mmap": False, "typical_p": 0.5}
    r = post_raw(server, "/api/generate", TINY_PROMPT | {"stream": False, "options": options})
    assert r.status_code == 200 and r.json()["eval_count"] <= 2


@pytest.mark.realmodel
def test_head_answers_where_ollamas_clients_probe(server):
    for path in ("/", "/api/version", "/api/tags"):
        assert httpx.head(f"{server.url}{path}").status_code == 200, path


@pytest.mark.realmodel
def test_version_tags_and_show(client):
    assert client._request_raw("GET", "/api/version").json()["version"]
    models = {m.model: m for m in client.list().models}
    assert {f"{SMOL}:latest", "tiny:latest"} <= set(models)
    smol = models[f"{SMOL}:latest"]
    assert smol.details.family == "llama" and smol.details.quantization_level == "Q4_1"
    assert smol.details.parameter_size.endswith("M") and smol.size > 50_000_000 and len(smol.digest) == 64
    shown = client.show(SMOL)
    assert shown.modelinfo["general.architecture"] == "llama" and "im_start" in shown.template
    assert "completion" in shown.capabilities


@pytest.mark.realmodel
def test_chat_whole_and_streamed_agree(client):
    whole = client.chat(model=SMOL, messages=QUESTION, options=GREEDY)
    assert whole.done and whole.message.role == "assistant" and whole.message.content
    assert whole.eval_count <= 12 and whole.prompt_eval_count > 5 and whole.done_reason in ("stop", "length")
    assert whole.total_duration >= whole.eval_duration > 0
    parts = list(client.chat(model=SMOL, messages=QUESTION, options=GREEDY, stream=True))
    assert parts[-1].done and not any(p.done for p in parts[:-1])
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert parts[-1].eval_count == whole.eval_count


@pytest.mark.realmodel
def test_generate_templated_raw_and_streamed(client):
    whole = client.generate(model=f"{SMOL}:latest", prompt="Name a color.", options=GREEDY)
    assert whole.response and whole.done
    streamed = "".join(p.response for p in client.generate(model=SMOL, prompt="Name a color.", options=GREEDY,
                                                            stream=True))
    assert streamed == whole.response
    raw = client.generate(model=SMOL, prompt="The capital of France is", raw=True,
                          options={"temperature": 0, "num_predict": 4})
    assert "Paris" in raw.response


@pytest.mark.realmodel
def test_format_json_and_schema_are_followed(client):
    schema = {"type": "object", "properties": {"color": {"type": "string", "enum": ["red", "green", "blue"]}},
              "required": ["color"], "additionalProperties": False}
    answer = client.chat(model=SMOL, messages=QUESTION, format=schema, options={"temperature": 0, "num_predict": 32})
    assert json.loads(answer.message.content)["color"] in ("red", "green", "blue")
    answer = client.generate(model=SMOL, prompt="Give a JSON object with a key 'a'.", format="json",
                             options={"temperature": 0, "num_predict": 48})
    assert answer.done_reason == "length" or isinstance(json.loads(answer.response), dict)


@pytest.mark.realmodel
def test_keep_alive_loads_and_unloads_and_ps_shows_it(client):
    client.generate(model="tiny", prompt="", keep_alive="10m")   # load only
    loaded = {m.model: m for m in client.ps().models}
    assert "tiny:latest" in loaded and loaded["tiny:latest"].context_length == 256   # -c 512, its trained 256
    minutes = (loaded["tiny:latest"].expires_at - datetime.now(timezone.utc)).total_seconds() / 60
    assert 9 < minutes <= 10.1
    unloaded = client.generate(model="tiny", prompt="", keep_alive=0)
    assert unloaded.done_reason == "unload"
    assert "tiny:latest" not in {m.model for m in client.ps().models}


@pytest.mark.realmodel
def test_a_tool_conversation_renders_and_answers(client):
    tools = [{"type": "function", "function": {"name": "weather", "description": "Weather in a city",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string"}}, "required": ["city"]}}}]
    messages = [{"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "weather", "arguments": {"city": "Oslo"}}}]},
                {"role": "tool", "tool_name": "weather", "content": "Rain, 4 C"}]
    answer = client.chat(model=SMOL, messages=messages, tools=tools, options={"temperature": 0, "num_predict": 96})
    assert answer.done and (answer.message.content or answer.message.tool_calls)
    for call in answer.message.tool_calls or []:
        assert call.function.name == "weather" and isinstance(call.function.arguments, dict)


@pytest.mark.realmodel
@pytest.mark.parametrize("path, body", [("/api/chat", {"messages": QUESTION}),
                                        ("/api/generate", {"prompt": "Name a color."})])
def test_a_format_the_engine_cannot_follow_names_format(server, path, body):
    r = post_raw(server, path, {"model": SMOL, "stream": False, "format": {"type": "bogus"}} | body)
    assert r.status_code == 400 and "'format'" in r.json()["error"] and "response_format" not in r.text, r.text


@pytest.mark.realmodel
def test_a_catalog_file_has_the_catalogs_digest_however_it_is_served(smollm2_path, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEINFER_MODELS_DIR", str(tmp_path))
    in_folder = next(m for m in folder_models() if m.model_id == SMOL)
    assert digest(single_model(smollm2_path, None, None)) == digest(in_folder) == get_entry(SMOL).sha256


@pytest.mark.realmodel
def test_errors_are_ollamas(client, server):
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="no-such-model", messages=QUESTION)
    assert e.value.status_code == 404 and "no-such-model" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model=SMOL, messages=QUESTION, think=True)   # SmolLM2 does not reason
    assert e.value.status_code == 400 and "does not support thinking" in e.value.error
    r = httpx.post(f"{server.url}/api/chat", json={"messages": QUESTION})
    assert r.status_code == 400 and isinstance(r.json()["error"], str) and "model" in r.json()["error"]
