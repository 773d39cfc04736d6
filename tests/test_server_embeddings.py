"""/v1/embeddings (OpenAI's shape, through the `openai` client), /v1/rerank and /rerank (Jina /
Cohere's, as llama.cpp's server), and Ollama's /api/embed and /api/embeddings over a scripted
model with Model.embed / Model.rerank's interface: input forms, float and base64, usage, one
engine call for a batch of 64 mixed inputs, over-long inputs (400 with the numbers, or cut with
truncate), Matryoshka dimensions only where the model allows them, and the refusals of a
generative model without --embeddings and of a non-reranker. The engine itself is checked in
the embeddings tests of the core."""
from __future__ import annotations

import base64
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import openai
import pytest
from fastapi.testclient import TestClient

from edgeinfer.server.app import create_app
from edgeinfer.server.config import ServerConfig
from edgeinfer.server.metrics import Metrics
from edgeinfer.server.model_pool import ModelPool
from edgeinfer.server.served_models import ServedModel
from edgeinfer.server.worker import Engine
from support.api_errors import api_error

DIM, N_CTX = 8, 16


class ScriptedEmbedder:
    """Token ids from characters; an embedding from the ids (deterministic); scores from overlap."""

    n_vocab, n_ctx, n_parallel, prompt_caches = 100, N_CTX, 1, [None]
    pooling = "mean"

    def __init__(self, can_embed=True, can_rerank=False, basename="tiny-embed"):
        self.can_embed, self.can_rerank = can_embed, can_rerank
        self.metadata = {"general.basename": basename}
        self.calls: list[int] = []   # inputs per embed() call

    def tokenize(self, text, add_special=True, parse_special=False):
        ids = [3 + ord(c) % 90 for c in text]
        return [1, *ids, 2] if add_special else ids

    def embed(self, inputs, normalize=True, truncate=False):
        self.calls.append(len(inputs))
        out = []
        for ids in inputs:
            ids = ids[:N_CTX] if truncate else ids
            assert len(ids) <= N_CTX
            v = np.array([np.sin(sum(ids) * (k + 1)) + len(ids) / 10 for k in range(DIM)], np.float32)
            out.append(v / np.linalg.norm(v) if normalize else v)
        return np.stack(out)

    def rerank(self, query, documents, truncate=False):
        words = set(query.lower().split())
        return np.array([len(words & set(d.lower().split())) - len(d) / 1000 for d in documents], np.float32)


@contextmanager
def client_for(model: ScriptedEmbedder, **config) -> Iterator[TestClient]:
    """A single-model server of `model`, once loaded (before, requests get 503)."""
    engine = Engine(lambda: model, Metrics(), 4)
    pool = ModelPool.of_one(ServedModel("emb", frozenset({"emb"}), Path("emb.gguf")), engine)
    with TestClient(create_app(ServerConfig(**config), pool)) as client:
        assert engine.wait_ready(10)
        yield client


@pytest.fixture
def embedder():
    return ScriptedEmbedder()


@pytest.fixture
def oa(embedder):
    with client_for(embedder) as http:
        yield openai.OpenAI(base_url="http://testserver/v1", api_key="none", http_client=http, max_retries=0)


def test_float_and_base64_through_the_openai_client(oa, embedder):
    texts = ["hello world", "a longer one", "x"]
    result = oa.embeddings.create(model="emb", input=texts)
    assert [d.index for d in result.data] == [0, 1, 2] and result.model == "emb"
    want = embedder.embed([embedder.tokenize(t) for t in texts])
    np.testing.assert_allclose(np.array([d.embedding for d in result.data]), want, rtol=1e-6)
    assert result.usage.prompt_tokens == result.usage.total_tokens == sum(len(t) + 2 for t in texts)
    raw = oa.embeddings.create(model="emb", input=texts, encoding_format="base64")   # asked for: left encoded
    np.testing.assert_array_equal(np.stack([np.frombuffer(base64.b64decode(d.embedding), "<f4") for d in raw.data]),
                                  want)


def test_base64_is_little_endian_float32(embedder):
    with client_for(embedder) as http:
        body = http.post("/v1/embeddings", json={"input": "hi", "encoding_format": "base64"}).json()
    vector = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), "<f4")
    np.testing.assert_array_equal(vector, embedder.embed([embedder.tokenize("hi")])[0])


@pytest.mark.parametrize("value, n, tokens", [("abc", 1, 5), (["a", "bc"], 2, 7), ([5, 6, 7], 1, 3),
                                              ([[5, 6], [7, 8, 9]], 2, 5)])
def test_input_forms(embedder, value, n, tokens):
    with client_for(embedder) as http:
        body = http.post("/embeddings", json={"input": value}).json()
    assert len(body["data"]) == n and body["usage"]["prompt_tokens"] == tokens


def test_a_batch_of_64_mixed_inputs_is_one_engine_call(embedder):
    texts = [("word " * (i % 3))[: 1 + i % 13] or "w" for i in range(64)]
    with client_for(embedder) as http:
        body = http.post("/v1/embeddings", json={"input": texts}).json()
    assert len(body["data"]) == 64 and embedder.calls == [64]


def test_over_long_inputs_are_refused_with_the_numbers_or_cut(embedder):
    long = "y" * 40
    with client_for(embedder) as http:
        error = api_error(http.post("/v1/embeddings", json={"input": ["ok", long]}), 400,
                          code="context_length_exceeded")
        assert "'input.1' has 42 tokens" in error["message"] and f"context of {N_CTX}" in error["message"]
        assert error["param"] == "input.1"
        cut = http.post("/v1/embeddings", json={"input": ["ok", long], "truncate": True}).json()
        assert cut["usage"]["prompt_tokens"] == 4 + N_CTX and len(cut["data"]) == 2
        for bad, where in (([], "input"), ([""], "input"), ([[1, 2], []], "input.1"), ([[1, 500]], "input")):
            assert api_error(http.post("/v1/embeddings", json={"input": bad}), 400)["param"] == where


def test_dimensions_only_for_matryoshka_models():
    with client_for(ScriptedEmbedder(basename="embeddinggemma-300m")) as http:
        body = http.post("/v1/embeddings", json={"input": "hi", "dimensions": 4}).json()
        vector = np.array(body["data"][0]["embedding"])
        assert vector.shape == (4,) and abs(np.linalg.norm(vector) - 1) < 1e-6
        assert "have 8" in api_error(http.post("/v1/embeddings", json={"input": "hi", "dimensions": 9}), 400)["message"]
    with client_for(ScriptedEmbedder()) as http:
        assert http.post("/v1/embeddings", json={"input": "hi", "dimensions": 8}).status_code == 200
        error = api_error(http.post("/v1/embeddings", json={"input": "hi", "dimensions": 4}), 400)
        assert error["param"] == "dimensions" and "Matryoshka" in error["message"]


def test_a_generative_model_needs_embeddings_enabled():
    with client_for(ScriptedEmbedder(can_embed=False)) as http:
        error = api_error(http.post("/v1/embeddings", json={"input": "hi"}), 400, code="embeddings_not_enabled")
        assert "--embeddings" in error["message"]


def test_rerank_orders_scores_and_echoes_documents():
    docs = ["the cat sat", "dogs bark loudly", {"text": "a cat and a dog"}, "cat cat"]
    with client_for(ScriptedEmbedder(can_rerank=True)) as http:
        for path in ("/v1/rerank", "/rerank"):
            body = http.post(path, json={"query": "cat dog", "documents": docs, "top_n": 3,
                                         "return_documents": True}).json()
            assert [r["index"] for r in body["results"]] == [2, 3, 0]   # overlap, then shorter first
            assert body["results"][0]["document"] == {"text": "a cat and a dog"}
            scores = [r["relevance_score"] for r in body["results"]]
            assert scores == sorted(scores, reverse=True) and body["usage"]["prompt_tokens"] > 0
        plain = http.post("/v1/rerank", json={"query": "cat", "documents": ["cat", "x"]}).json()
        assert "document" not in plain["results"][0] and len(plain["results"]) == 2
        assert api_error(http.post("/v1/rerank", json={"query": "q", "documents": [{"title": "no text"}]}),
                         400)["param"] == "documents.0"
    with client_for(ScriptedEmbedder()) as http:
        api_error(http.post("/v1/rerank", json={"query": "q", "documents": ["d"]}), 400, code="not_a_reranker")


def test_ollamas_embed_cuts_by_default_and_its_old_endpoint_does_not_normalize(embedder):
    with client_for(embedder) as http:
        body = http.post("/api/embed", json={"model": "emb", "input": ["hi", "y" * 40]}).json()
        assert len(body["embeddings"]) == 2 and body["prompt_eval_count"] == 4 + N_CTX and body["model"] == "emb:latest"
        refused = http.post("/api/embed", json={"model": "emb", "input": "y" * 40, "truncate": False})
        assert refused.status_code == 400 and "42 tokens" in refused.json()["error"]
        old = http.post("/api/embeddings", json={"model": "emb", "prompt": "hi"}).json()["embedding"]
        np.testing.assert_allclose(old, embedder.embed([embedder.tokenize("hi")], normalize=False)[0], rtol=1e-6)


@pytest.mark.parametrize("path, raw, field", [
    ("/api/embed", '{"model": "emb", "input": ["ok", "\\ud83d"]}', "input.1"),
    ("/api/embed", '{"model": "emb", "input": "\\udfff"}', "input"),
    ("/api/embeddings", '{"model": "emb", "prompt": "\\ud83d"}', "prompt"),
    ("/api/embed", '{"model": "emb", "input": ["a", 1]}', "input.1"),
    ("/api/embed", '{"model": "emb", "input": "a", "truncate": "no"}', "truncate"),
])
def test_ollamas_embeddings_refuse_bad_input_naming_the_field(embedder, path, raw, field):
    with client_for(embedder) as http:
        r = http.post(path, content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400 and f"'{field}'" in r.json()["error"], r.text
    assert embedder.calls == []


@pytest.mark.parametrize("path, body, answer", [
    ("/api/embed", {"input": ""}, "embeddings"), ("/api/embed", {"input": []}, "embeddings"),
    ("/api/embed", {}, "embeddings"), ("/api/embeddings", {"prompt": ""}, "embedding"),
    ("/api/embeddings", {}, "embedding"),
])
def test_ollamas_empty_embedding_input_loads_the_model_only(embedder, path, body, answer):
    with client_for(embedder) as http:
        r = http.post(path, json={"model": "emb", **body})
    assert r.status_code == 200 and r.json()[answer] == [] and embedder.calls == []
