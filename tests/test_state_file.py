"""Saved context states on disk: restore-then-generate equals a cold run, and every kind of bad
file (truncated, bit-flipped anywhere, another model, another KV type) is refused with
StateFileError while the context stays exactly as it was."""
from __future__ import annotations

import os

import numpy as np
import pytest

from edgeinfer.errors import EdgeInferError, StateFileError
from edgeinfer.model import Model
from support.tiny_llama import HD32, TinyConfig

PROMPT = [5, 77, 230, 12, 150, 9, 200, 41, 33, 260, 17, 88, 101]
HEADER_BYTES = 120   # version 3 (112 in versions 1 and 2)


@pytest.fixture(scope="module")
def paths(tiny_llama_file):
    return {name: tiny_llama_file(cfg, seed)[0]
            for name, cfg, seed in [("a", TinyConfig(), 0), ("same_dims_other_seed", TinyConfig(), 1),
                                    ("other_dims", TinyConfig(n_embd=96, n_head=6, n_head_kv=3), 0),
                                    ("hd32", HD32, 0)]}


def load(path, **kw) -> Model:
    kw.setdefault("n_ctx", 64)
    return Model.load(path, n_threads=2, **kw)


def greedy(model: Model, prompt, n=12) -> list[int]:
    return model.complete(prompt, max_tokens=n, temperature=0).tokens


@pytest.fixture
def saved(paths, tmp_path):
    """A state of model `a` holding PROMPT, and its path."""
    m = load(paths["a"])
    m.prompt_cache.decode(PROMPT)
    state = tmp_path / "prompt.eis"
    assert m.save_state(state) == len(PROMPT)
    return state


def snapshot_of(model: Model) -> tuple[int, list[int], bytes]:
    ctx = model.context
    return ctx.n_past, list(model.prompt_cache.tokens), ctx.kv_snapshot(ctx.n_past).tobytes()


def busy_model(path) -> Model:
    """A context that already holds something a failed load must not disturb."""
    m = load(path)
    m.prompt_cache.decode([9, 8, 7, 6, 5])
    return m


def test_restore_then_generate_equals_cold(paths, saved):
    cold = greedy(load(paths["a"]), PROMPT + [44])
    warm = load(paths["a"])
    assert warm.load_state(saved) == len(PROMPT)
    assert warm.prompt_cache.tokens == PROMPT
    result = warm.complete(PROMPT + [44], max_tokens=12, temperature=0)
    assert result.cached_tokens == len(PROMPT)
    assert result.tokens == cold


def test_restored_kv_rows_are_bit_identical(paths, saved):
    a = load(paths["a"])
    a.prompt_cache.decode(PROMPT)
    b = load(paths["a"])
    b.load_state(saved)
    assert np.array_equal(a.context.kv_snapshot(len(PROMPT)), b.context.kv_snapshot(len(PROMPT)))


def test_save_is_atomic_and_leaves_no_temporary_files(paths, tmp_path):
    m = load(paths["a"])
    m.prompt_cache.decode(PROMPT)
    target = tmp_path / "s.eis"
    target.write_bytes(b"old")
    m.save_state(target)
    assert sorted(os.listdir(tmp_path)) == ["s.eis"]
    with pytest.raises(EdgeInferError, match="cannot write state"):
        m.save_state(tmp_path / "missing-dir" / "s.eis")
    assert sorted(os.listdir(tmp_path)) == ["s.eis"]


@pytest.mark.parametrize("keep", ["empty", "header-1", "header", "mid-tokens", "mid-kv", "all-but-checksum",
                                  "all-but-one"])
def test_truncated_file_is_refused_and_nothing_changes(paths, saved, tmp_path, keep):
    data = saved.read_bytes()
    n_tok = len(PROMPT) * 4
    cut = {"empty": 0, "header-1": HEADER_BYTES - 1, "header": HEADER_BYTES,
           "mid-tokens": HEADER_BYTES + n_tok // 2, "mid-kv": (HEADER_BYTES + n_tok + len(data) - 8) // 2,
           "all-but-checksum": len(data) - 8, "all-but-one": len(data) - 1}[keep]
    bad = tmp_path / "bad.eis"
    bad.write_bytes(data[:cut])
    m = busy_model(paths["a"])
    before = snapshot_of(m)
    with pytest.raises(StateFileError):
        m.load_state(bad)
    assert snapshot_of(m) == before


def test_every_flipped_byte_is_refused(paths, saved, tmp_path):
    data = bytearray(saved.read_bytes())
    m = busy_model(paths["a"])
    before = snapshot_of(m)
    bad = tmp_path / "flip.eis"
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 1 << (i % 8)
        bad.write_bytes(flipped)
        with pytest.raises(StateFileError):
            m.load_state(bad)
    assert snapshot_of(m) == before
    bad.write_bytes(data + b"\0")
    with pytest.raises(StateFileError, match="truncated or corrupt"):
        m.load_state(bad)


def test_missing_and_foreign_files_are_refused(paths, saved, tmp_path):
    m = busy_model(paths["a"])
    before = snapshot_of(m)
    with pytest.raises(StateFileError):
        m.load_state(tmp_path / "nope.eis")
    with pytest.raises(StateFileError, match="not an edgeinfer state"):
        m.load_state(paths["a"])  # a GGUF file
    assert snapshot_of(m) == before


@pytest.mark.parametrize("other", ["same_dims_other_seed", "other_dims"])
def test_state_from_another_model_is_refused(paths, saved, other):
    m = busy_model(paths[other])
    before = snapshot_of(m)
    with pytest.raises(StateFileError, match="different model"):
        m.load_state(saved)
    assert snapshot_of(m) == before


def test_state_with_other_kv_types_is_refused(paths, tmp_path):
    f16 = load(paths["hd32"])
    f16.prompt_cache.decode(PROMPT)
    state = tmp_path / "f16.eis"
    f16.save_state(state)
    q8 = load(paths["hd32"], cache_type_k="q8_0", cache_type_v="q8_0")
    with pytest.raises(StateFileError, match="f16/f16 KV cache"):
        q8.load_state(state)
    assert q8.context.n_past == 0
    # A quantized state round-trips into a context of the same types.
    q8.prompt_cache.decode(PROMPT)
    q8.save_state(tmp_path / "q8.eis")
    again = load(paths["hd32"], cache_type_k="q8_0", cache_type_v="q8_0")
    again.load_state(tmp_path / "q8.eis")
    assert greedy(again, PROMPT + [3]) == greedy(load(paths["hd32"], cache_type_k="q8_0", cache_type_v="q8_0"),
                                                 PROMPT + [3])


def test_state_of_a_rotated_k_cache_is_refused_by_an_unrotated_context(paths, tmp_path):
    """The rotation is part of the cache format: q4_0 keys stored rotated are not q4_0 keys."""
    rotated = load(paths["hd32"], cache_type_k="q4_0", cache_type_v="q4_0")
    assert rotated.cache_rotate_k
    rotated.prompt_cache.decode(PROMPT)
    state = tmp_path / "q4r.eis"
    rotated.save_state(state)
    plain = load(paths["hd32"], cache_type_k="q4_0", cache_type_v="q4_0", cache_rotate_k=False, cache_center_k=False)
    with pytest.raises(StateFileError, match=r"q4_0/q4_0 \(K rotated, centered, 64 sink rows\) KV cache .* "
                                             r"uses q4_0/q4_0$"):
        plain.load_state(state)
    assert plain.context.n_past == 0
    again = load(paths["hd32"], cache_type_k="q4_0", cache_type_v="q4_0")
    again.load_state(state)
    assert greedy(again, PROMPT + [3]) == greedy(load(paths["hd32"], cache_type_k="q4_0", cache_type_v="q4_0"),
                                                 PROMPT + [3])


def test_state_larger_than_the_context_is_refused(paths, saved):
    small = Model.load(paths["a"], n_ctx=8, n_threads=2)
    with pytest.raises(StateFileError, match="room for 8"):
        small.load_state(saved)


LONG_PROMPT = [int(t) for t in np.random.default_rng(3).integers(3, 250, 90)]   # past the 64 sink rows


def load_centered(path, **kw) -> Model:
    """A q4_0 cache (rotated and centered by default) with room past the sink rows."""
    kw.setdefault("n_ctx", 128)
    return load(path, cache_type_k="q4_0", cache_type_v="q4_0", **kw)


def test_state_of_a_centered_k_cache_round_trips_and_records_its_sink_rows(paths, tmp_path):
    """A centered q4_0 state holds the sink rows and mu / s of every layer; restored, it generates
    what a cold run generates, and the header (version 3) says how many sink rows it has."""
    m = load_centered(paths["hd32"])
    assert m.cache_center_k
    m.prompt_cache.decode(LONG_PROMPT)
    state = tmp_path / "q4c.eis"
    m.save_state(state)
    raw = state.read_bytes()
    assert int.from_bytes(raw[8:12], "little") == 3 and int.from_bytes(raw[12:16], "little") == HEADER_BYTES
    assert int.from_bytes(raw[104:112], "little") == 3                  # kv_flags: rotated | centered
    assert int.from_bytes(raw[112:116], "little") == 64                 # kv_sink_rows
    again = load_centered(paths["hd32"])
    assert again.load_state(state) == len(LONG_PROMPT)
    assert snapshot_of(again)[2] == snapshot_of(m)[2]
    cold = load_centered(paths["hd32"])
    assert greedy(again, LONG_PROMPT + [3]) == greedy(cold, LONG_PROMPT + [3])


def test_state_of_a_centered_k_cache_is_refused_by_an_uncentered_context_and_back(paths, tmp_path):
    centered = load_centered(paths["hd32"])
    centered.prompt_cache.decode(LONG_PROMPT)
    centered.save_state(tmp_path / "c.eis")
    plain = load_centered(paths["hd32"], cache_center_k=False)
    plain.prompt_cache.decode(LONG_PROMPT)
    plain.save_state(tmp_path / "p.eis")
    for state, ctx, holds in [("c.eis", plain, "K rotated, centered, 64 sink rows"), ("p.eis", centered, "K rotated")]:
        before = snapshot_of(ctx)
        with pytest.raises(StateFileError, match=rf"holds a q4_0/q4_0 \({holds}\) KV cache"):
            ctx.load_state(tmp_path / state)
        assert snapshot_of(ctx) == before


def test_state_with_another_number_of_sink_rows_is_refused(paths, tmp_path):
    """The sink rows are part of the format: states saved when a centered cache kept 32 of them
    (before kv/centered_k.h's kSinkRows became 64) hold 32 F16 rows and a mean and scale taken from
    them. A context of 32 positions still keeps 32 (min(kSinkRows, n_ctx)), so its state stands
    for such a file; a context with 64 sink rows refuses it by name and stays as it was."""
    small = load_centered(paths["hd32"], n_ctx=32)
    small.prompt_cache.decode(LONG_PROMPT[:30])
    small.save_state(tmp_path / "s32.eis")
    assert int.from_bytes((tmp_path / "s32.eis").read_bytes()[112:116], "little") == 32
    big = load_centered(paths["hd32"])
    big.prompt_cache.decode(LONG_PROMPT)
    before = snapshot_of(big)
    with pytest.raises(StateFileError, match=r"holds a q4_0/q4_0 \(K rotated, centered, 32 sink rows\) KV cache .* "
                                             r"uses q4_0/q4_0 \(K rotated, centered, 64 sink rows\)$"):
        big.load_state(tmp_path / "s32.eis")
    assert snapshot_of(big) == before
