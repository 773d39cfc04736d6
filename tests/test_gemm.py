"""The tiled matmul kernels (table entry `gemm`) against the same table's vec_dot: every output
bit-identical, for every weight type and every ISA that has a gemm, on shapes that exercise the
row-tile tails (m % 4), the column-panel tails (n % 8) and SmolLM2's row lengths. The prompt
path relies on this to stay bit-exact with llama.cpp (tests/test_llamacpp_exact.py)."""
from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402

from edgeinfer import _core  # noqa: E402
from edgeinfer import _testing  # noqa: E402
from support.isas import isas_under_test  # noqa: E402
from support.kernel_tables import isas_with_gemm  # noqa: E402
from support.quant_rows import random_blocks  # noqa: E402

GEMM_TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
SHAPES = [(1, 1, 32), (5, 3, 64), (13, 11, 160), (8, 16, 576), (6, 9, 1536)]  # (m rows, n columns, k)


def test_scalar_and_avx512_tables_have_gemms_where_expected():
    for qtype in GEMM_TYPES:
        isas = isas_with_gemm(qtype)
        assert "scalar" in isas
        if "avx512" in _core.available_isas():
            assert "avx512" in isas
        if "avx2" in _core.available_isas():
            assert "avx2" in isas


@pytest.mark.parametrize("qtype", GEMM_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_gemm_is_bit_identical_to_vec_dot(qtype, m, n, k):
    rng = np.random.default_rng([int(qtype), m, n, k])
    w = random_blocks(qtype, m * k, rng)
    act = (rng.standard_normal((n, k)) * rng.uniform(0.1, 10, size=(n, 1))).astype(np.float32)
    act[0, :7] = 0.0  # a partly zero row, and below an all-zero one (d = 0)
    if n > 2:
        act[2] = 0.0
    for isa in isas_under_test(isas_with_gemm(qtype)):
        got = _testing.gemm(int(qtype), w, m, act, isa)
        want = _testing.gemm(int(qtype), w, m, act, isa, by_vec_dot=True)
        assert got.shape == (n, m)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (isa, np.abs(got - want).max())


@pytest.mark.parametrize("qtype", GEMM_TYPES, ids=lambda t: t.name)
def test_avx512_gemm_agrees_with_the_scalar_reference(qtype):
    """Across ISAs only the float summation order differs (same bound as test_kernels.py)."""
    if "avx512" not in isas_under_test(isas_with_gemm(qtype)):
        pytest.skip("no AVX-512 table under test on this machine")
    rng = np.random.default_rng(int(qtype))
    m, n, k = 12, 10, 576
    w = random_blocks(qtype, m * k, rng)
    act = rng.standard_normal((n, k)).astype(np.float32)
    fast = _testing.gemm(int(qtype), w, m, act, "avx512")
    ref = _testing.gemm(int(qtype), w, m, act, "scalar")
    deq = np.stack([_core.dequantize(int(qtype), w.reshape(m, -1)[r], k) for r in range(m)])
    bound = 1e-5 * (np.abs(act) @ np.abs(deq).T) + 1e-6
    assert (np.abs(fast - ref) <= bound).all()


# -- the float GEMM (F32 and F16 weights: prompt chunks, encoder batches of embedding models) ----

# (m rows, n columns, k): row tails off the 4-row tile, column tails off the 2- and 4-column tiles
# and the 64-column block, k with a 32-element tail and under 32, several 384-element spans with a
# partial last one, and BERT-base's row lengths.
FLOAT_SHAPES = [(1, 1, 32), (2, 3, 20), (3, 5, 40), (7, 9, 200), (9, 131, 384), (5, 3, 1536), (4, 8, 768),
                (6, 70, 1000)]


@pytest.mark.parametrize("qtype", [T.F32, T.F16], ids=lambda t: t.name)
@pytest.mark.parametrize("m,n,k", FLOAT_SHAPES)
def test_float_gemm_is_bit_identical_to_vec_dot(qtype, m, n, k):
    """So an embedding model's inputs packed into one batch each get what they get alone."""
    rng = np.random.default_rng([int(qtype), m, n, k])
    dtype = np.float32 if qtype == T.F32 else np.float16
    w = (rng.standard_normal((m, k)) * rng.uniform(0.01, 3, size=(m, 1))).astype(dtype)
    act = (rng.standard_normal((n, k)) * rng.uniform(0.1, 10, size=(n, 1))).astype(np.float32)
    act[0, :7] = 0.0
    isas = isas_with_gemm(qtype)
    # The scalar table has none: one vec_dot per output in row tiles is its fastest form.
    assert isas == [isa for isa in ("avx2", "avx512") if isa in _core.available_isas()]
    for isa in isas_under_test(isas):
        got = _testing.gemm(int(qtype), w.view(np.uint8).reshape(-1), m, act, isa)
        want = _testing.gemm(int(qtype), w.view(np.uint8).reshape(-1), m, act, isa, by_vec_dot=True)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (isa, np.abs(got - want).max())


# -- the small-batch GEMM (gemm_small_batch: decode batches) ---------------------------

# Column counts: each remainder after passes of 8, whole passes, and more than one pass.
COLUMN_COUNTS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 19]


def test_the_x86_tables_have_small_batch_gemms_for_the_32_element_types():
    expected = [isa for isa in ("avx2", "avx512") if isa in _core.available_isas()]
    for qtype in GEMM_TYPES:
        assert isas_with_gemm(qtype, "small_batch") == expected, qtype.name


@pytest.mark.parametrize("qtype", GEMM_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("n", COLUMN_COUNTS)
@pytest.mark.parametrize("m", [1, 7, 16])
def test_small_batch_gemm_is_bit_identical_to_vec_dot(qtype, m, n):
    """So a token decoded in a batch gets exactly the logits it gets decoded alone."""
    k = 576
    rng = np.random.default_rng([int(qtype), m, n])
    w = random_blocks(qtype, m * k, rng)
    act = (rng.standard_normal((n, k)) * rng.uniform(0.1, 10, size=(n, 1))).astype(np.float32)
    act[0, :7] = 0.0
    if n > 2:
        act[2] = 0.0
    isas = isas_under_test(isas_with_gemm(qtype, "small_batch"))
    if not isas:
        pytest.skip("no ISA under test with a small-batch GEMM on this machine")
    for isa in isas:
        got = _testing.gemm(int(qtype), w, m, act, isa, order="small_batch")
        want = _testing.gemm(int(qtype), w, m, act, isa, by_vec_dot=True, order="small_batch")
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (isa, np.abs(got - want).max())


KQUANT_SMALL_BATCH = [(T.Q6_K, "small_batch"), (T.Q4_K, "small_batch_repacked")]


@pytest.mark.parametrize("qtype,order", KQUANT_SMALL_BATCH, ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("n", COLUMN_COUNTS)
def test_kquant_small_batch_gemm_is_bit_identical_to_its_one_row_order(qtype, order, n):
    """Q6_K against vec_dot, Q4_K against the repacked GEMV's dot (its one-row order)."""
    m, k = 5, 512
    rng = np.random.default_rng([int(qtype), n])
    w = random_blocks(qtype, m * k, rng)
    act = (rng.standard_normal((n, k)) * rng.uniform(0.1, 10, size=(n, 1))).astype(np.float32)
    isas = isas_with_gemm(qtype, order)
    assert isas == [isa for isa in ("avx2", "avx512") if isa in _core.available_isas()]
    for isa in isas_under_test(isas):
        got = _testing.gemm(int(qtype), w, m, act, isa, order=order)
        want = _testing.gemm(int(qtype), w, m, act, isa, by_vec_dot=True, order=order)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (isa, np.abs(got - want).max())


# -- the k-quant GEMMs (gemm_ggml_repack / gemm_ggml_tiled) against their per-output orders ----------------

KQUANT_ORDERS = [(T.Q4_K, "repacked_gemm"), (T.Q4_K, "tiled"), (T.Q5_K, "tiled"), (T.Q6_K, "tiled")]
# (m rows, n columns, k): row counts off the 16-row tile, column counts off the 4-column tile.
KQUANT_SHAPES = [(1, 4, 256), (5, 7, 512), (19, 13, 1024), (40, 40, 2048), (16, 8, 768), (33, 5, 256)]


def test_the_x86_tables_have_the_kquant_gemms():
    expected = [isa for isa in ("avx2", "avx512") if isa in _core.available_isas()]
    if not expected:
        pytest.skip("no x86 SIMD on this machine")
    for qtype, order in KQUANT_ORDERS:
        assert isas_with_gemm(qtype, order) == expected, (qtype.name, order)


@pytest.mark.parametrize("qtype,order", KQUANT_ORDERS, ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("m,n,k", KQUANT_SHAPES)
def test_kquant_gemm_is_bit_identical_to_its_per_output_order(qtype, order, m, n, k):
    isas = isas_under_test(isas_with_gemm(qtype, order))
    if not isas:
        pytest.skip("no k-quant gemm under test on this machine")
    rng = np.random.default_rng([int(qtype), m, n, k])
    w = random_blocks(qtype, m * k, rng, d_scale=0.01)
    act = (rng.standard_normal((n, k)) * rng.uniform(0.1, 10, size=(n, 1))).astype(np.float32)
    act[0, :7] = 0.0  # a partly zero column, an all-zero one (d = 0) and one of a single large value
    if n > 2:
        act[2] = 0.0
    if n > 3:
        act[3] = 0.0
        act[3, 5] = -1000.0  # quantizes to -128
    for isa in isas:
        got = _testing.gemm(int(qtype), w, m, act, isa, order=order)
        want = _testing.gemm(int(qtype), w, m, act, isa, by_vec_dot=True, order=order)
        assert got.shape == (n, m)
        assert np.isfinite(want).all()
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (isa, np.abs(got - want).max())


def test_gemm_rejects_an_unknown_order():
    with pytest.raises(Exception, match="order"):
        _testing.gemm(int(T.Q4_K), np.zeros(144, np.uint8), 1, np.zeros((1, 256), np.float32), order="bogus")
