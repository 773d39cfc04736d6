"""A server of many models (`edgeinfer serve` without MODEL): what it lists, loading a model on a
request's first use of its name (the request waits), unloading by keep-alive and least recently
used first within --max-loaded and the memory budget, and the 503s when a model cannot fit
(alone: never; beside busy ones: retry) — never an out-of-memory kill. Tiny random llama files
in a temporary models folder; one run of the real command with the real model beside one."""
from __future__ import annotations

import gc
import threading
import time
import weakref
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from edgeinfer.model import Model
from edgeinfer.server.app import create_app
from edgeinfer.server.config import ServerConfig, parse_keep_alive
from edgeinfer.server.metrics import Metrics
from edgeinfer.server.model_pool import ModelPool
from edgeinfer.server.served_models import ServedModel, folder_models, memory_estimate, split_parts
from edgeinfer.server.worker import Engine
from support.api_errors import api_error
from support.server_process import openai_client
from support.tiny_llama import TinyConfig, write_tiny_llama

TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
N_CTX = 64


@pytest.fixture
def models_dir(tmp_path, monkeypatch) -> Path:
    """A models folder with two tiny models, alpha and beta (different weights)."""
    folder = tmp_path / "models"
    folder.mkdir()
    for seed, name in enumerate(("alpha", "beta")):
        write_tiny_llama(folder / f"{name}.gguf", TinyConfig(), seed=seed, chat_template=TEMPLATE)
    monkeypatch.setenv("EDGEINFER_MODELS_DIR", str(folder))
    return folder


class Loads:
    """Engines over the real tiny files, counting loads, with an optional gate held during loading."""

    def __init__(self):
        self.metrics = Metrics()
        self.loaded: list[str] = []
        self.gate: threading.Event | None = None
        self.models: dict[str, weakref.ref] = {}

    def __call__(self, served: ServedModel) -> Engine:
        def load() -> Model:
            if self.gate is not None:
                assert self.gate.wait(10)
            model = Model.load(served.path, n_ctx=N_CTX, n_threads=1)
            self.loaded.append(served.model_id)
            self.models[served.model_id] = weakref.ref(model)
            return model

        return Engine(load, self.metrics, 4)


def pool_of(loads: Loads, **kw) -> ModelPool:
    local = lambda: [m for m in folder_models() if m.entry is None]   # noqa: E731 - the tiny files only
    kw.setdefault("estimate", lambda m: 1000)
    return ModelPool(local, loads, metrics=loads.metrics, **kw)


def chat(client: TestClient, model: str | None, **kw):
    body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 3, "temperature": 0, **kw}
    if model is not None:
        body["model"] = model
    return client.post("/v1/chat/completions", json=body)


def test_keep_alive_spellings():
    assert parse_keep_alive("5m") == 300 and parse_keep_alive("1h30m") == 5400 and parse_keep_alive("500ms") == 0.5
    assert parse_keep_alive("30") == 30 and parse_keep_alive(0) == 0 and parse_keep_alive("0") == 0
    assert parse_keep_alive(-1) is None and parse_keep_alive("-1") is None and parse_keep_alive("-5m") is None
    for bad in ("", "five", "5 minutes", "5d", "m5"):
        with pytest.raises(ValueError, match="not a duration"):
            parse_keep_alive(bad)


def test_the_folder_lists_files_once_by_name_and_the_known_models(models_dir):
    (models_dir / "big-00001-of-00002.gguf").write_bytes(b"x" * 10)
    (models_dir / "big-00002-of-00002.gguf").write_bytes(b"y" * 5)
    (models_dir / "notes.txt").write_text("not a model")
    served = {m.model_id: m for m in folder_models()}
    assert {"alpha", "beta", "big"} <= set(served) and "big-00002-of-00002" not in served
    assert served["big"].file_size == 15 and len(split_parts(served["big"].path)) == 2
    assert "alpha.gguf" in served["alpha"].accepted_ids
    known = [m for m in served.values() if m.entry is not None]
    assert known and all(m.model_id == m.entry.name for m in known)   # pulled on first use


def test_memory_estimate_is_the_file_and_the_kv_caches(models_dir):
    served = next(m for m in folder_models() if m.model_id == "alpha")
    model = Model.load(served.path, n_ctx=N_CTX, n_threads=1, n_parallel=2)
    assert memory_estimate(served, N_CTX, 2, "f16") == served.file_size + 2 * model.kv_bytes


def test_a_request_loads_its_model_by_name_and_the_listing_follows(models_dir):
    loads = Loads()
    with TestClient(create_app(ServerConfig(), pool_of(loads))) as client:
        listed = {card["id"]: card for card in client.get("/v1/models").json()["data"]}
        assert listed["alpha"]["status"] == listed["beta"]["status"] == "available"
        assert listed["alpha"]["n_ctx"] is None and listed["alpha"]["size"] == (models_dir / "alpha.gguf").stat().st_size
        a = chat(client, "alpha")
        assert a.status_code == 200 and a.json()["model"] == "alpha"
        b = chat(client, "beta.gguf")
        assert b.status_code == 200 and b.json()["model"] == "beta"
        assert loads.loaded == ["alpha", "beta"]   # each once
        assert chat(client, "alpha:latest").status_code == 200 and loads.loaded == ["alpha", "beta"]
        listed = {card["id"]: card for card in client.get("/v1/models").json()["data"]}
        assert listed["alpha"]["status"] == "loaded" and listed["alpha"]["n_ctx"] == N_CTX
        assert sorted(client.get("/health").json()["loaded"]) == ["alpha", "beta"]
        assert chat(client, None).json()["model"] == "alpha"   # no name: the model used last
        missing = api_error(chat(client, "gamma"), 404, code="model_not_found")["message"]
        assert "alpha" in missing and "beta" in missing


def test_a_request_for_a_loading_model_waits_for_it(models_dir):
    loads = Loads()
    loads.gate = threading.Event()
    with TestClient(create_app(ServerConfig(), pool_of(loads))) as client:
        answers = []
        waiting = [threading.Thread(target=lambda: answers.append(chat(client, "alpha"))) for _ in range(2)]
        for thread in waiting:
            thread.start()
        time.sleep(0.5)
        assert not answers
        assert client.get("/v1/models/alpha").json()["status"] == "loading"
        loads.gate.set()
        for thread in waiting:
            thread.join(30)
        assert [a.status_code for a in answers] == [200, 200] and loads.loaded == ["alpha"]


def test_max_loaded_unloads_the_least_recently_used_and_frees_it(models_dir):
    loads = Loads()
    with TestClient(create_app(ServerConfig(), pool_of(loads, max_loaded=1))) as client:
        assert chat(client, "alpha").status_code == 200
        assert chat(client, "beta").status_code == 200
        assert client.get("/health").json()["loaded"] == ["beta"]
        gc.collect()
        assert loads.models["alpha"]() is None   # its memory went back
        assert chat(client, "alpha").status_code == 200 and loads.loaded == ["alpha", "beta", "alpha"]


def test_an_idle_model_is_unloaded_after_its_keep_alive(models_dir):
    loads = Loads()
    with TestClient(create_app(ServerConfig(), pool_of(loads, keep_alive=0.5))) as client:
        assert chat(client, "alpha").status_code == 200
        assert client.get("/health").json()["loaded"] == ["alpha"]
        deadline = time.monotonic() + 10
        while client.get("/health").json()["loaded"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert client.get("/health").json()["loaded"] == []
        assert client.get("/v1/models/alpha").json()["status"] == "available"


def test_a_model_larger_than_the_budget_is_refused_with_the_sizes(models_dir):
    loads = Loads()
    pool = pool_of(loads, memory_budget=2**30, estimate=lambda m: 3 * 2**30 if m.model_id == "beta" else 2**20)
    with TestClient(create_app(ServerConfig(), pool)) as client:
        message = api_error(chat(client, "beta"), 503, code="insufficient_memory")["message"]
        assert "3.00 GiB" in message and "1.00 GiB" in message and "--memory-budget" in message
        assert chat(client, "alpha").status_code == 200 and loads.loaded == ["alpha"]


def test_no_room_beside_a_busy_model_is_a_503_to_retry(models_dir):
    loads = Loads()
    pool = pool_of(loads, memory_budget=2**30, estimate=lambda m: 600 * 2**20)   # one fits, not two
    with TestClient(create_app(ServerConfig(), pool)) as client:
        assert chat(client, "alpha").status_code == 200
        resident = pool.residents()[0]
        resident.leases += 1      # a request of alpha's in progress
        r = chat(client, "beta")
        assert api_error(r, 503, code="models_busy") and r.headers["retry-after"]
        resident.leases -= 1
        assert chat(client, "beta").status_code == 200
        assert [r.served.model_id for r in pool.residents()] == ["beta"]


@pytest.mark.realmodel
def test_serve_without_a_model_serves_the_folder_by_name(models_dir, smollm2_path, tmp_path):
    (models_dir / smollm2_path.name).symlink_to(smollm2_path)
    # Without MODEL the server starts with nothing loaded: the first request loads what it names.
    with openai_client(None, None, tmp_path, "--max-loaded", "1", "-c", "256") as client:
        names = {m.id for m in client.models.list().data}
        assert {"alpha", "beta", "smollm2-135m-instruct"} <= names   # the catalog's name for the known file
        answer = client.chat.completions.create(model="smollm2", max_tokens=8, temperature=0,   # by its alias
                                                messages=[{"role": "user", "content": "What is 2+2?"}])
        assert answer.model == "smollm2-135m-instruct" and answer.choices[0].message.content
        other = client.completions.create(model="alpha", prompt="hello", max_tokens=3, temperature=0)
        assert other.model == "alpha"
        loaded = [m.id for m in client.models.list().data if getattr(m, "status", None) == "loaded"]
        assert loaded == ["alpha"]   # --max-loaded 1: smollm2 made room


def test_a_broken_file_is_a_503_with_the_reason_and_the_others_still_serve(models_dir):
    (models_dir / "broken.gguf").write_bytes(b"GGUF" + b"\x00" * 64)
    (models_dir / "dangling.gguf").symlink_to(models_dir / "gone.gguf")
    (models_dir / "folder.gguf").mkdir()
    loads = Loads()
    with TestClient(create_app(ServerConfig(), pool_of(loads))) as client:
        listed = {card["id"]: card["status"] for card in client.get("/v1/models").json()["data"]}
        assert listed["broken"] == "available"
        # A link to nothing or a folder is no model file, and nothing can pull it: not listed.
        tags = {m["name"] for m in client.get("/api/tags").json()["models"]}
        assert "broken:latest" in tags and not {"dangling", "folder"} & set(listed)
        assert not {"dangling:latest", "folder:latest"} & tags
        api_error(chat(client, "dangling"), 404, code="model_not_found")
        first = api_error(chat(client, "broken"), 503, code="model_failed")["message"]
        assert "failed to load" in first
        again = api_error(chat(client, "broken"), 503, code="model_failed")["message"]   # tried again, not cached
        assert again == first
        assert chat(client, "alpha").status_code == 200
        assert client.get("/api/tags").status_code == 200 and client.get("/health").json()["loaded"] == ["alpha"]
        shown = client.post("/api/show", json={"model": "broken"})   # as every other route answers it
        assert shown.status_code == 503 and "cannot be read" in shown.json()["error"] and "version 0" in shown.json()["error"]


def ollama_unload(client: TestClient, model: str):
    return client.post("/api/generate", json={"model": model, "prompt": "", "keep_alive": 0}).json()


def test_keep_alive_0_unloads_once_the_model_is_idle_and_loads_nothing(models_dir):
    loads = Loads()
    pool = pool_of(loads)
    with TestClient(create_app(ServerConfig(), pool)) as client:
        assert ollama_unload(client, "beta")["done_reason"] == "unload" and loads.loaded == []   # as Ollama's
        assert chat(client, "alpha").status_code == 200
        resident = pool.residents()[0]
        resident.leases += 1      # a request of alpha's in progress
        assert ollama_unload(client, "alpha")["done_reason"] == "unload"
        assert client.get("/health").json()["loaded"] == ["alpha"]   # not under the request
        resident.leases -= 1
        deadline = time.monotonic() + 10
        while client.get("/health").json()["loaded"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert client.get("/health").json()["loaded"] == [] and loads.loaded == ["alpha"]


def test_only_a_hub_name_is_advised_to_be_pulled(models_dir):
    with TestClient(create_app(ServerConfig(), pool_of(Loads()))) as client:
        for name in ("/etc/passwd", "../models/alpha", "gamma"):
            assert "edgeinfer pull" not in api_error(chat(client, name), 404, code="model_not_found")["message"]
        hub = api_error(chat(client, "hf.co/nobody/nothing-GGUF"), 404, code="model_not_found")["message"]
        assert "edgeinfer pull hf.co/nobody/nothing-GGUF" in hub
