"""Embeddings and reranking served from real engines: `edgeinfer serve` with SmolLM2 and
--embeddings --pooling mean through the `openai` client (float and base64 give Model.embed's
vectors; a batch of 64 mixed inputs gives each what it gets alone; over-long inputs; chats keep
working beside embeddings, at the same time), a tiny BERT encoder and a BERT cross-encoder (the
embedding model cannot chat; /v1/rerank gives Model.rerank's scores best first), and the
`edgeinfer embed` / `edgeinfer rerank` commands."""
from __future__ import annotations

import base64
import json
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from fastapi.testclient import TestClient  # noqa: E402

from edgeinfer import Model  # noqa: E402
from edgeinfer.cli import main as cli_main  # noqa: E402
from edgeinfer.server.app import create_app  # noqa: E402
from edgeinfer.server.config import ServerConfig  # noqa: E402
from edgeinfer.server.metrics import Metrics  # noqa: E402
from edgeinfer.server.model_pool import ModelPool  # noqa: E402
from edgeinfer.server.served_models import ServedModel  # noqa: E402
from edgeinfer.server.worker import Engine  # noqa: E402
from support.api_errors import api_error  # noqa: E402
from support.cli import run_cli  # noqa: E402
from support.server_process import openai_client  # noqa: E402
from support.tiny_bert import make_bert, save_bert_folder, write_cross_encoder  # noqa: E402

TEXTS = ["The cat sat on the mat.", "Local inference on a laptop", "x"]


@pytest.fixture(scope="module")
def smol(smollm2_path, tmp_path_factory):
    with openai_client(smollm2_path, "smol", tmp_path_factory.mktemp("embed-server"), "--embeddings",
                       "--pooling", "mean", "-c", "256", "-np", "2") as client:
        yield client


@pytest.fixture(scope="module")
def smol_direct(smollm2_path):
    return Model.load(smollm2_path, n_ctx=256, embeddings=True, pooling="mean")


@pytest.mark.realmodel
def test_float_and_base64_are_model_embeds_vectors(smol, smol_direct):
    result = smol.embeddings.create(model="smol", input=TEXTS)
    got = np.array([d.embedding for d in result.data], np.float32)
    np.testing.assert_array_equal(got, smol_direct.embed(TEXTS))
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    assert result.usage.prompt_tokens == sum(len(smol_direct.tokenize(t)) for t in TEXTS)
    raw = smol.embeddings.create(model="smol", input=TEXTS, encoding_format="base64")
    decoded = np.stack([np.frombuffer(base64.b64decode(d.embedding), "<f4") for d in raw.data])
    np.testing.assert_array_equal(decoded, got)


@pytest.mark.realmodel
def test_a_batch_of_64_mixed_inputs_gives_each_what_it_gets_alone(smol):
    rng = np.random.default_rng(0)
    words = "local models answer questions about notes code and documents quickly".split()
    texts = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(1, 120, size=64)]
    batch = np.array([d.embedding for d in smol.embeddings.create(model="smol", input=texts).data])
    for i in (0, 17, 63):
        alone = smol.embeddings.create(model="smol", input=texts[i]).data[0].embedding
        np.testing.assert_array_equal(batch[i], alone)


@pytest.mark.realmodel
def test_over_long_inputs_are_refused_or_cut(smol):
    import openai

    long = "word " * 400
    with pytest.raises(openai.BadRequestError, match="more than this model's context of 256"):
        smol.embeddings.create(model="smol", input=["short", long])
    cut = smol.embeddings.create(model="smol", input=["short", long], extra_body={"truncate": True})
    assert len(cut.data) == 2 and cut.usage.prompt_tokens <= 256 + 10


@pytest.mark.realmodel
def test_chats_keep_working_beside_embeddings(smol):
    results: dict[str, object] = {}
    streaming = threading.Event()

    def chat(key: str):
        stream = smol.chat.completions.create(model="smol", stream=True, max_tokens=64, temperature=0,
                                              messages=[{"role": "user", "content": "Count to thirty."}])
        text = ""
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
                streaming.set()
        results[key] = text

    def embed():
        assert streaming.wait(60)   # while the chats stream: their decode steps and the embeddings interleave
        results["embed"] = [len(smol.embeddings.create(model="smol", input=TEXTS).data) for _ in range(8)]

    threads = [threading.Thread(target=chat, args=("a",)), threading.Thread(target=embed),
               threading.Thread(target=chat, args=("b",))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results.get("embed") == [3] * 8 and results.get("a") and results.get("b")
    after = smol.chat.completions.create(model="smol", max_tokens=8, temperature=0,
                                         messages=[{"role": "user", "content": "Say hi."}])
    assert after.choices[0].message.content


@pytest.fixture(scope="module")
def bert_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bert-serve")
    save_bert_folder(tmp / "hf", make_bert(), "mean")
    assert cli_main(["convert", str(tmp / "hf"), str(tmp / "embed.gguf"), "--outtype", "f32"]) == 0
    write_cross_encoder(tmp / "hf-rank")
    assert cli_main(["convert", str(tmp / "hf-rank"), str(tmp / "rank.gguf"), "--outtype", "f32"]) == 0
    return tmp / "embed.gguf", tmp / "rank.gguf"


@contextmanager
def served(path: Path) -> Iterator[TestClient]:
    """A single-model server of `path`, once its model has loaded (before, requests get 503)."""
    engine = Engine(lambda: Model.load(path, n_ctx=64, n_threads=1), Metrics(), 4)
    app = create_app(ServerConfig(), ModelPool.of_one(ServedModel("m", frozenset({"m"}), path), engine))
    with TestClient(app) as client:
        assert engine.wait_ready(60)
        yield client


def test_an_embedding_model_embeds_and_cannot_chat(bert_files):
    path, _ = bert_files
    direct = Model.load(path, n_ctx=64, n_threads=1)
    texts = ["the quick brown fox", "hello world and more"]
    with served(path) as http:
        body = http.post("/v1/embeddings", json={"input": texts}).json()
        np.testing.assert_array_equal(np.array([d["embedding"] for d in body["data"]], np.float32), direct.embed(texts))
        error = api_error(http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}),
                          400, code="not_a_generative_model")
        assert "embedding model" in error["message"]
        api_error(http.post("/v1/rerank", json={"query": "q", "documents": ["d"]}), 400, code="not_a_reranker")
        ollama = http.post("/api/embed", json={"model": "m", "input": texts}).json()
        np.testing.assert_allclose(ollama["embeddings"], direct.embed(texts), rtol=1e-6)


def test_a_cross_encoder_reranks_best_first(bert_files):
    _, path = bert_files
    direct = Model.load(path, n_ctx=64, n_threads=1)
    docs = ["the quick brown fox", "hello world", "a lazy dog jumps over"]
    scores = direct.rerank("quick fox", docs)
    with served(path) as http:
        body = http.post("/v1/rerank", json={"query": "quick fox", "documents": docs, "return_documents": True}).json()
    assert [r["index"] for r in body["results"]] == list(np.argsort(-scores))
    assert np.allclose([r["relevance_score"] for r in body["results"]], np.sort(scores)[::-1], rtol=1e-6)
    assert body["results"][0]["document"]["text"] == docs[int(np.argmax(scores))]


def test_the_embed_and_rerank_commands(bert_files):
    embed_path, rank_path = bert_files
    texts = ["the quick brown fox", "hello"]
    out = run_cli("embed", str(embed_path), *texts, "-c", "64")
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    want = Model.load(embed_path, n_ctx=64).embed(texts)
    assert [line["index"] for line in lines] == [0, 1]
    np.testing.assert_allclose([line["embedding"] for line in lines], want, rtol=1e-6)
    out = run_cli("rerank", str(rank_path), "quick fox", "hello world", "the quick brown fox", "-c", "64")
    assert out.returncode == 0, out.stderr
    ranked = [json.loads(line) for line in out.stdout.splitlines()]
    assert sorted(r["index"] for r in ranked) == [0, 1]
    assert ranked[0]["score"] >= ranked[1]["score"]
    refused = run_cli("rerank", str(embed_path), "q", "d", "-c", "64")
    assert refused.returncode == 1 and "cannot rerank" in refused.stderr and "Traceback" not in refused.stderr
