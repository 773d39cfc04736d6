"""The server's engine thread, app wiring and middleware, with a scripted stand-in for the model:
FIFO order, the queue limit, cancellation, /health while loading, the body limit and the API key."""
from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from edgeinfer.generate import GenerationResult
from edgeinfer.server.app import create_app
from edgeinfer.server.config import ServerConfig
from edgeinfer.server.model_pool import ModelPool
from edgeinfer.server.served_models import ServedModel
from edgeinfer.server.errors import APIError
from edgeinfer.server.metrics import Metrics
from edgeinfer.server.worker import Engine, Failed, Finished, GenerationJob, Piece
from support.api_errors import api_error


class ScriptedModel:
    """generate() yields `n_tokens` pieces, calling on_token before each, optionally waiting on
    `gate` first; it records the prompts it was given, in order. One slot (no prompt cache)."""

    n_ctx = 64
    prompt_caches = [None]
    n_parallel = 1

    def __init__(self, gate: threading.Event | None = None):
        self.gate = gate
        self.prompts: list[list[int]] = []
        self.steps = 0

    def generate(self, prompt, max_tokens=4, on_token=None, **options):
        self.prompts.append(list(prompt))
        if self.gate is not None:
            assert self.gate.wait(10)
        result = GenerationResult(prompt_tokens=len(prompt))
        for i in range(max_tokens):
            on_token(100 + i, np.zeros(8, dtype=np.float32))
            self.steps += 1
            result.tokens.append(100 + i)
            yield f"t{i} "
            time.sleep(0.001)
        result.text = "".join(f"t{i} " for i in range(max_tokens))
        return result


def make_engine(model, max_queue=4, load_gate: threading.Event | None = None) -> Engine:
    def load():
        if load_gate is not None:
            assert load_gate.wait(10)
        return model

    engine = Engine(load, Metrics(), max_queue)
    engine.start()
    return engine


async def drain(job: GenerationJob) -> list:
    events = []
    while True:
        event = await asyncio.wait_for(job.next_event(), 10)
        events.append(event)
        if isinstance(event, (Finished, Failed)):
            return events


def test_jobs_run_one_at_a_time_in_arrival_order():
    model = ScriptedModel()
    engine = make_engine(model, max_queue=8)
    assert engine.wait_ready(5)

    async def main():
        jobs = [GenerationJob([i], {"max_tokens": 3}) for i in range(5)]
        for job in jobs:
            engine.submit(job)
        return [await drain(job) for job in jobs]

    results = asyncio.run(main())
    assert model.prompts == [[i] for i in range(5)]
    for events in results:
        assert [e.text for e in events if isinstance(e, Piece)] == ["t0 ", "t1 ", "t2 "]
        assert isinstance(events[-1], Finished) and events[-1].result.tokens == [100, 101, 102]
    engine.shutdown()


def test_with_two_slots_two_jobs_run_at_once_and_the_third_waits_for_a_free_one():
    gate = threading.Event()
    model = ScriptedModel(gate)
    model.prompt_caches = [None, None]
    engine = make_engine(model, max_queue=8)
    assert engine.wait_ready(5) and engine.n_slots == 2

    async def main():
        jobs = [GenerationJob([i], {"max_tokens": 2}) for i in range(3)]
        for job in jobs:
            engine.submit(job)
        while len(model.prompts) < 2:   # both slots took a job and wait on the gate
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.05)
        assert sorted(model.prompts) == [[0], [1]] and engine.queue_depth == 1 and engine.idle_slots == 0
        gate.set()
        return [await drain(job) for job in jobs]

    results = asyncio.run(main())
    assert sorted(model.prompts[:2]) == [[0], [1]] and model.prompts[2] == [2]
    assert all(isinstance(events[-1], Finished) for events in results)
    assert engine.idle_slots == 2 and engine.in_flight == 0
    text = engine.metrics.render(engine.in_flight, engine.queue_depth, True, engine.slot_states())
    assert 'edgeinfer_slot_busy{slot="1"} 0' in text and "edgeinfer_slots 2" in text
    assert sum(int(line.split()[-1]) for line in text.splitlines()
               if line.startswith("edgeinfer_slot_requests_total{")) == 3
    engine.shutdown()


def test_a_full_queue_is_503_with_retry_after_and_a_cancelled_queued_job_is_skipped():
    gate = threading.Event()
    model = ScriptedModel(gate)
    engine = make_engine(model, max_queue=2)
    assert engine.wait_ready(5)

    async def main():
        running = GenerationJob([0], {"max_tokens": 1})
        engine.submit(running)
        while not model.prompts:   # the engine has taken it and waits on the gate
            await asyncio.sleep(0.001)
        queued = [GenerationJob([1], {"max_tokens": 1}), GenerationJob([2], {"max_tokens": 1})]
        for job in queued:
            engine.submit(job)
        assert engine.queue_depth == 2 and engine.in_flight == 3
        with pytest.raises(APIError) as err:
            engine.submit(GenerationJob([3], {"max_tokens": 1}))
        assert err.value.status == 503 and err.value.headers["Retry-After"] and err.value.code == "queue_full"
        queued[0].cancel()   # its client left while it waited
        gate.set()
        await drain(running)
        await drain(queued[1])

    asyncio.run(main())
    assert model.prompts == [[0], [2]]
    snap = engine.metrics.snapshot()
    assert (snap.requests_ok, snap.requests_cancelled, snap.requests_rejected) == (2, 1, 1)
    engine.shutdown()


def test_cancelling_a_running_job_stops_it_at_the_next_token():
    model = ScriptedModel()
    engine = make_engine(model)
    assert engine.wait_ready(5)

    async def main():
        job = GenerationJob([0], {"max_tokens": 1000})
        engine.submit(job)
        first = await asyncio.wait_for(job.next_event(), 10)
        assert isinstance(first, Piece)
        job.cancel()
        steps_at_cancel = model.steps
        events = await drain(job)
        assert model.steps <= steps_at_cancel + 1   # at most the step already past its check
        assert isinstance(events[-1], Failed)
        # The engine is free again: the next job runs at once.
        after = GenerationJob([1], {"max_tokens": 2})
        engine.submit(after)
        assert isinstance((await drain(after))[-1], Finished)

    asyncio.run(main())
    assert engine.metrics.snapshot().requests_cancelled == 1
    engine.shutdown()


def config(**kw) -> ServerConfig:
    return ServerConfig(**kw)


def one(engine: Engine, model_id: str = "m", path: Path = Path("model.gguf")) -> ModelPool:
    """The single-model server's pool of `engine`."""
    return ModelPool.of_one(ServedModel(model_id, frozenset({model_id}), path), engine)


def test_health_is_503_while_loading_then_200():
    gate = threading.Event()
    engine = Engine(lambda: gate.wait(10) and ScriptedModel(), Metrics(), 4)
    with TestClient(create_app(config(), one(engine))) as client:
        r = client.get("/health")
        assert r.status_code == 503 and r.json()["status"] == "loading"
        r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
        api_error(r, 503, code="model_loading")
        assert r.headers["retry-after"]
        gate.set()
        assert engine.wait_ready(5)
        assert client.get("/health").status_code == 200


def never_loading() -> tuple[Engine, threading.Event]:
    """An engine whose model stays loading until the returned event is set."""
    gate = threading.Event()
    return Engine(lambda: gate.wait(10) and ScriptedModel(), Metrics(), 4), gate


def test_body_limit_applies_to_chunked_bodies_too():
    engine, gate = never_loading()
    with TestClient(create_app(config(max_body_bytes=1000), one(engine))) as client:
        r = client.post("/v1/chat/completions", content=iter([b"{" + b" " * 600, b" " * 600 + b"}"]))
        api_error(r, 413, code="request_too_large")
        r = client.post("/v1/chat/completions", content=b"{" + b" " * 2000 + b"}")
        assert r.status_code == 413
        r = client.post("/v1/chat/completions", content=iter([b"[1,", b"2]"]))   # small, chunked: read
        api_error(r, code="invalid_body")
        gate.set()


def test_api_key_as_bearer_or_header_and_cors_only_when_asked():
    engine, gate = never_loading()
    app = create_app(config(api_key="k", cors_origins=("http://app.local",)), one(engine))
    with TestClient(app) as client:
        assert client.get("/v1/models").status_code == 401
        assert client.get("/v1/models", headers={"Authorization": "Bearer nope"}).status_code == 401
        listed = client.get("/v1/models", headers={"Authorization": "Bearer k"})
        assert listed.status_code == 200 and listed.json()["data"][0]["status"] == "loading"
        assert client.get("/v1/models", headers={"X-Api-Key": "k"}).status_code == 200
        assert client.get("/health").status_code == 503
        pre = client.options("/v1/chat/completions", headers={"Origin": "http://app.local",
                                                              "Access-Control-Request-Method": "POST"})
        assert pre.headers["access-control-allow-origin"] == "http://app.local"
        gate.set()
    plain, gate = never_loading()
    with TestClient(create_app(config(), one(plain))) as client:
        r = client.get("/health", headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in r.headers
        gate.set()


@pytest.mark.realmodel
def test_a_chat_template_refusal_is_a_400_with_the_reason(gemma3_path):
    """Gemma's template raises on roles that do not alternate: the client gets that reason, not a
    500 and not a prompt in some other format."""
    from edgeinfer.model import Model

    engine = Engine(lambda: Model.load(gemma3_path, n_ctx=256, n_threads=1), Metrics(), 4)
    with TestClient(create_app(ServerConfig(max_tokens_limit=2), one(engine, "gemma3", gemma3_path))) as client:
        assert engine.wait_ready(30)
        r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "a"},
                                                                    {"role": "user", "content": "b"}]})
        assert "alternate" in api_error(r, code="chat_template_error")["message"]
        ok = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                       "max_tokens": 2})
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] <= 2


class BreakingModel(ScriptedModel):
    """Fails after two tokens, as a generation that hits a fault would."""

    def generate(self, prompt, max_tokens=4, on_token=None, **options):
        for i in range(2):
            on_token(100 + i, None)
            yield f"t{i} "
        raise RuntimeError("the engine broke")


class PieceVocab:
    def token_to_piece(self, token, special):
        return f"<{token}>".encode()


def test_an_error_after_the_stream_started_is_an_error_event_without_done(caplog):
    from edgeinfer.server.responses import ChatResponses
    from edgeinfer.server.sse import stream_job

    engine = make_engine(BreakingModel())
    assert engine.wait_ready(5)

    async def main():
        job = GenerationJob([1], {"max_tokens": 10})
        engine.submit(job)
        return [chunk async for chunk in stream_job(job, ChatResponses("m", "fp", PieceVocab(), False), True)]

    chunks = asyncio.run(main())
    payloads = [json.loads(c[len(b"data: "):]) for c in chunks]
    assert payloads[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [p["choices"][0]["delta"]["content"] for p in payloads[1:3]] == ["t0 ", "t1 "]
    error = payloads[-1]["error"]
    assert error["type"] == "server_error" and error["code"] == "internal_error"
    # The client gets an id, never the exception's text; the log has the text and the traceback.
    assert "the engine broke" not in error["message"]
    error_id = re.search(r"error id ([0-9a-f]{12})", error["message"]).group(1)
    logged = next(r for r in caplog.records if error_id in r.getMessage())
    assert logged.exc_info and "the engine broke" in str(logged.exc_info[1])
    assert all(c.startswith(b"data: {") and c.endswith(b"\n\n") for c in chunks)   # no [DONE]
    assert engine.metrics.snapshot().requests_failed == 1
    engine.shutdown()
