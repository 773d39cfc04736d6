"""Several sequences in one context (parallel requests): each has its own cache, a batch mixes
their tokens, and what a sequence computes never depends on what shares its batch. Checked on
both real models against each sequence decoded alone, token by token (the one-row order every
row of a sequence batch is computed in), bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

from edgeinfer import _core

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module", params=["smollm2_path", "gemma3_path"])
def model(request):
    return _core.Model(str(request.getfixturevalue(request.param)))


def ids(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(100, 20000, n).astype(np.int32)


def alone(model, tokens: np.ndarray, kv_type: str = "f16") -> np.ndarray:
    """Every token's logits, decoding the sequence one token per call."""
    ctx = _core.Context(model, n_ctx=96, n_threads=2, type_k=kv_type, type_v=kv_type)
    rows = []
    for t in tokens:
        ctx.decode(np.array([t], np.int32))
        rows.append(np.array(ctx.logits[-1]))
    return np.stack(rows)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("kv_type", ["f16", "q4_0"])
def test_interleaved_sequences_get_the_logits_each_gets_alone(model, kv_type):
    a, b, c = ids(1, 30), ids(2, 12), ids(3, 20)
    want = [alone(model, a, kv_type), alone(model, b, kv_type), alone(model, c, kv_type)]
    ctx = _core.Context(model, n_ctx=96, n_threads=2, type_k=kv_type, type_v=kv_type, n_seq=3)
    # A prompt chunk of one sequence beside single tokens of the others, then a step of all three.
    ctx.decode_sequences(np.concatenate([a[:25], b[:1], c[:3]]), np.array([0] * 25 + [1] + [2] * 3, np.int32),
                         logits=np.ones(29, bool))
    got = np.array(ctx.logits)
    assert same_bits(got[:25], want[0][:25]) and same_bits(got[25:26], want[1][:1]) and same_bits(got[26:], want[2][:3])
    assert [ctx.sequence(s).n_past for s in range(3)] == [25, 1, 3]
    # A sequence's tokens need not be adjacent; default logits: each sequence's last token.
    ctx.decode_sequences(np.array([c[3], a[25], b[1], c[4]], np.int32), np.array([2, 0, 1, 2], np.int32))
    got = np.array(ctx.logits)
    assert got.shape[0] == 3
    assert same_bits(got[0], want[0][25]) and same_bits(got[1], want[1][1]) and same_bits(got[2], want[2][4])


def test_a_copied_prefix_continues_like_the_original(model):
    shared, end_a, end_b = ids(4, 16), ids(5, 4), ids(6, 4)
    ctx = _core.Context(model, n_ctx=64, n_threads=2, n_seq=2)
    ctx.decode_sequences(shared, np.zeros(16, np.int32))
    ctx.seq_copy(0, 1, 16)
    ctx.decode_sequences(np.concatenate([end_a, end_b]), np.array([0] * 4 + [1] * 4, np.int32),
                         logits=np.ones(8, bool))
    got = np.array(ctx.logits)
    assert same_bits(got[:4], alone(model, np.concatenate([shared, end_a]))[16:])
    assert same_bits(got[4:], alone(model, np.concatenate([shared, end_b]))[16:])


def test_a_truncated_sequence_is_reused_and_the_others_are_untouched(model):
    a, b, other = ids(7, 10), ids(8, 10), ids(9, 6)
    ctx = _core.Context(model, n_ctx=64, n_threads=2, n_seq=2)
    ctx.decode_sequences(np.concatenate([a, other]), np.array([0] * 10 + [1] * 6, np.int32))
    ctx.sequence(1).truncate(0)  # a finished request's slot, emptied
    assert ctx.sequence(1).n_past == 0 and ctx.n_past == 10
    ctx.decode_sequences(np.concatenate([b, a[:1]]), np.array([1] * 10 + [0], np.int32), logits=np.ones(11, bool))
    got = np.array(ctx.logits)
    assert same_bits(got[:10], alone(model, b))
    assert same_bits(got[10], alone(model, np.concatenate([a, a[:1]]))[10])


def test_bad_batches_are_refused_and_change_nothing(model):
    ctx = _core.Context(model, n_ctx=8, n_threads=2, n_seq=2)
    ctx.decode_sequences(ids(10, 6), np.zeros(6, np.int32))
    with pytest.raises(_core.ContextOverflowError, match="sequence 0: 6 cached \\+ 3 new tokens exceed its context size of 8"):
        ctx.decode_sequences(ids(11, 4), np.array([1, 0, 0, 0], np.int32))
    with pytest.raises(_core.EdgeInferError, match="sequence id 2 at index 1 is outside 0..1"):
        ctx.decode_sequences(ids(12, 2), np.array([0, 2], np.int32))
    with pytest.raises(_core.EdgeInferError, match="token id -1 at index 0"):
        ctx.decode_sequences(np.array([-1], np.int32), np.array([1], np.int32))
    with pytest.raises(_core.EdgeInferError, match="same length"):
        ctx.decode_sequences(ids(13, 2), np.array([0], np.int32))
    with pytest.raises(_core.EdgeInferError, match="seq_copy: sequence 1 has 0 cached positions, not 3"):
        ctx.seq_copy(1, 0, 3)
    with pytest.raises(_core.EdgeInferError, match="sequence 5 is outside 0..1"):
        ctx.sequence(5)
    assert [ctx.sequence(s).n_past for s in range(2)] == [6, 0]
    with pytest.raises(_core.EdgeInferError, match="n_seq must be in 1..256"):
        _core.Context(model, n_ctx=8, n_seq=0)


def test_a_sequence_decodes_a_prompt_as_sequence_zero_does(model, tmp_path):
    """The single-sequence API on another sequence (a server slot's prompt, its prefix snapshots,
    its context shift, its saved state) gives what sequence 0 gives, and leaves sequence 0 alone."""
    prompt, more = ids(14, 40), ids(15, 3)
    ref = _core.Context(model, n_ctx=64, n_threads=2, n_batch=16)
    ref.decode(prompt, all_logits=True)
    want_prompt = np.array(ref.logits)
    ctx = _core.Context(model, n_ctx=64, n_threads=2, n_batch=16, n_seq=3)
    ctx.decode(ids(16, 5))
    seq = ctx.sequence(2)
    seq.decode(prompt, all_logits=True)
    assert same_bits(np.array(seq.logits), want_prompt)
    assert (seq.n_past, ctx.n_past, ctx.sequence(1).n_past) == (40, 5, 0)
    # A snapshot of one sequence restores into another; a saved state loads into a third.
    ctx.sequence(1).kv_restore(seq.kv_snapshot(40), 40, 30)
    seq.save_state(str(tmp_path / "s.eistate"), prompt)
    ctx.sequence(0).truncate(0)
    assert ctx.load_state(str(tmp_path / "s.eistate")) == prompt.tolist()
    ref.shift(1, 10)
    seq.shift(1, 10)
    ref.decode(more, all_logits=True)
    want_more = np.array(ref.logits)
    for s in (seq, ctx.sequence(0)):
        if s is not seq:
            s.shift(1, 10)
        s.decode(more, all_logits=True)
        assert same_bits(np.array(s.logits), want_more)
    # The restored 30 positions continue as sequence 0 continues the same 30, in the same batch:
    # a 2-row batch need not give a 16-row chunk's bits (llama.cpp's Q4_K GEMM and GEMV orders
    # differ on AVX2, and Gemma 3's file has Q4_K matrices).
    cont = _core.Context(model, n_ctx=64, n_threads=2, n_batch=16)
    cont.decode(prompt)
    cont.sequence(0).truncate(30)
    cont.decode(prompt[30:32], all_logits=True)
    ctx.sequence(1).decode(prompt[30:32], all_logits=True)
    assert same_bits(np.array(ctx.logits), np.array(cont.logits))
