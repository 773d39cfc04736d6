"""Pooled hidden states of a generative model (llama.cpp's --embeddings; Qwen3-Embedding is a qwen3
file with pooling last): a tiny random Qwen 3 checkpoint converted by `edgeinfer convert`, loaded
with embeddings=True, gives transformers' last_hidden_state (after the final norm) pooled the same
way (none, mean, cls, last) within cosine 0.9999; a batch of inputs gives each exactly the floats
it gets alone; an input longer than the context is refused or, with truncate=True, cut to it; a
model loaded without embeddings=True refuses to embed."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from edgeinfer import Model  # noqa: E402
from edgeinfer.cli import main as cli_main  # noqa: E402
from edgeinfer.errors import ContextOverflowError, EdgeInferError  # noqa: E402
from support.hf_tiny import SAMPLE_TEXTS, make_tiny_checkpoint, train_sentencepiece  # noqa: E402


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(the transformers model, edgeinfer's F32 file of it)."""
    tmp = tmp_path_factory.mktemp("embed_qwen3")
    spm = train_sentencepiece(tmp / "spm")
    model = make_tiny_checkpoint(tmp / "hf", "qwen3", spm)
    assert cli_main(["convert", str(tmp / "hf"), str(tmp / "model.gguf"), "--outtype", "f32"]) == 0
    return model, tmp / "model.gguf"


def _hf_hidden(model, ids: list[int]) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model.model(torch.tensor([ids])).last_hidden_state[0].float().numpy()


def _pool(h: np.ndarray, pooling: str) -> np.ndarray:
    return {"mean": h.mean(axis=0), "cls": h[0], "last": h[-1], "none": h}[pooling]


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("pooling", ["mean", "cls", "last"])
def test_pooled_hidden_states_match_transformers(converted, pooling):
    hf, path = converted
    m = Model.load(path, n_ctx=128, embeddings=True, pooling=pooling)
    assert m.can_embed and not m.can_rerank and m.pooling == pooling and m.n_embd_out == 64
    ids = [m.tokenize(t) for t in SAMPLE_TEXTS]
    got = m.embed(ids, normalize=False)
    assert got.shape == (len(ids), 64) and got.dtype == np.float32
    for row, i in zip(got, ids):
        assert _cos(row, _pool(_hf_hidden(hf, i), pooling)) >= 0.9999
    normed = m.embed(ids)
    np.testing.assert_allclose(np.linalg.norm(normed, axis=1), 1.0, rtol=1e-5)


def test_pooling_none_gives_every_token(converted):
    hf, path = converted
    m = Model.load(path, n_ctx=128, embeddings=True)
    assert m.pooling == "none"   # a file without a pooling type, as in llama.cpp
    ids = m.tokenize(SAMPLE_TEXTS[4])
    (rows,) = m.embed([ids], normalize=False)
    ref = _hf_hidden(hf, ids)
    assert rows.shape == ref.shape
    assert min(_cos(a, b) for a, b in zip(rows, ref)) >= 0.9999


def test_texts_and_ids_give_the_same_embedding(converted):
    _, path = converted
    m = Model.load(path, n_ctx=128, embeddings=True, pooling="mean")
    text = SAMPLE_TEXTS[0]
    np.testing.assert_array_equal(m.embed(text), m.embed(m.tokenize(text)))
    np.testing.assert_array_equal(m.embed([text])[0], m.embed(text)[0])
    assert m.embed([]).shape == (0, 64)


def test_a_batch_gives_each_input_what_it_gets_alone(converted):
    _, path = converted
    # n_batch 8: the longer inputs run in several chunks (never an error).
    m = Model.load(path, n_ctx=128, n_batch=8, embeddings=True, pooling="last")
    together = m.embed(SAMPLE_TEXTS, normalize=False)
    alone = np.stack([m.embed(t, normalize=False)[0] for t in reversed(SAMPLE_TEXTS)][::-1])
    assert together.tobytes() == alone.tobytes()
    # and generation afterwards starts from an empty cache
    ids = m.tokenize(SAMPLE_TEXTS[0])
    before = m.eval_logits(ids)
    m.embed(SAMPLE_TEXTS[1])
    assert m.eval_logits(ids).tobytes() == before.tobytes()


def test_chunked_input_matches_one_pass(converted):
    _, path = converted
    ids = Model.load(path, n_ctx=128, embeddings=True).tokenize(SAMPLE_TEXTS[6])
    one = Model.load(path, n_ctx=128, n_batch=512, embeddings=True, pooling="mean").embed(ids)
    chunked = Model.load(path, n_ctx=128, n_batch=5, embeddings=True, pooling="mean").embed(ids)
    assert _cos(one[0], chunked[0]) >= 0.99999


def test_an_input_longer_than_the_context_is_refused_or_truncated(converted):
    _, path = converted
    m = Model.load(path, n_ctx=16, embeddings=True, pooling="mean")
    ids = m.tokenize(SAMPLE_TEXTS[0] + " " + SAMPLE_TEXTS[1])
    assert len(ids) > 16
    with pytest.raises(ContextOverflowError, match=f"{len(ids)} tokens.*16"):
        m.embed(ids)
    np.testing.assert_array_equal(m.embed(ids, truncate=True), m.embed(ids[:16]))


def test_a_generative_model_needs_embeddings_true(converted):
    _, path = converted
    m = Model.load(path, n_ctx=64)
    assert not m.can_embed
    with pytest.raises(EdgeInferError, match="embeddings=True"):
        m.embed("hello")
    with pytest.raises(EdgeInferError, match="rerank"):
        Model.load(path, n_ctx=64, embeddings=True).rerank("q", ["d"])
    with pytest.raises(ValueError, match="pooling"):
        Model.load(path, n_ctx=64, pooling="max")
