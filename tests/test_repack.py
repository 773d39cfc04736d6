"""Q4_0, Q4_1, Q5_0 and Q8_0 weights repacked at load into 16-row groups (native/src/cpu/repack.h)
and the packed GEMV/GEMM over them (table entry `gemm_16row_groups`).

Q4_0: every ISA's kernel bit-identical to the scalar reference; the results within the
float-accumulation bound of the exact dot products (the packed order is not vec_dot's, so not
bit-identical to it); a model loads its Q4_0 weights repacked and gives the same tokens as with
repacking switched off (EDGEINFER_REPACK=0).

Q4_1, Q5_0 and Q8_0 (llama.cpp-exact), on the tables that repack them: the packed kernels give the
table's own vec_dot bits, for one column (the decode GEMV), a few (one GEMV pass each) and prompt
chunks (the tiled GEMM reading the groups); SmolLM2 Q4_1 and Gemma 3 (whose Q4_K_M file has its
640-wide rows in Q5_0 and its output matrix in Q8_0) give bit-identical logits with and without
repacking, prompt and decode steps."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402

from edgeinfer import _core  # noqa: E402
from edgeinfer import _testing  # noqa: E402
from support.cli import child_env  # noqa: E402
from support.isas import isas_under_test  # noqa: E402
from support.kernel_tables import isas_with_gemm  # noqa: E402
from support.quant_rows import random_blocks  # noqa: E402
from support.real_models import smollm2_requantized  # noqa: E402

# (m rows, n columns, k): one group, several groups, column counts off the 8-column panel (and
# several panels), SmolLM2's row lengths (576, 1536) and its K/V width (192 rows).
SHAPES = [(16, 1, 32), (32, 3, 64), (48, 9, 160), (192, 1, 576), (16, 17, 1536), (64, 8, 576), (32, 21, 96)]


def random_activations(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    act = (rng.standard_normal((n, k)) * rng.uniform(0.1, 10, size=(n, 1))).astype(np.float32)
    act[0, :7] = 0.0  # a partly zero row, and below an all-zero one (d = 0)
    if n > 2:
        act[2] = 0.0
    return act


EXACT_PACKED = {T.Q4_1: ("avx2", "avx512"), T.Q5_0: ("avx2",), T.Q8_0: ("avx512",)}


def test_every_table_has_the_packed_q4_0_gemm():
    isas = isas_with_gemm(T.Q4_0, "packed")
    assert "scalar" in isas
    for isa in ("avx2", "avx512"):
        if isa in _core.available_isas():
            assert isa in isas
    # The exact types' packed kernels compute their table's vec_dot order: AVX2 packs Q4_1 and
    # Q5_0, AVX-512 Q4_1 and Q8_0 (its Q5_0 keeps the tiled GEMM and vec_dot); never the scalar
    # table, whose vec_dot has another order.
    for qtype, isas in EXACT_PACKED.items():
        assert isas_with_gemm(qtype, "packed") == [isa for isa in _core.available_isas() if isa in isas]


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_packed_gemm_is_bit_identical_across_isas(m, n, k):
    rng = np.random.default_rng([m, n, k])
    w = random_blocks(T.Q4_0, m * k, rng, signed_d=True)
    act = random_activations(n, k, rng)
    ref = _testing.gemm(int(T.Q4_0), w, m, act, "scalar", order="packed")
    assert ref.shape == (n, m)
    for isa in isas_under_test(isas_with_gemm(T.Q4_0, "packed")):
        got = _testing.gemm(int(T.Q4_0), w, m, act, isa, order="packed")
        assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), (isa, np.abs(got - ref).max())


@pytest.mark.parametrize("isa", isas_under_test(isas_with_gemm(T.Q4_0, "packed")))
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_packed_gemm_is_within_the_rounding_bound_of_the_exact_products(m, n, k, isa):
    """Per output: the block terms d_w d_a isum are exact in float (fp16 x fp16 products, integer
    sums below 2^24), so the only error is the FMA chain over nb blocks: at most nb ulps of the
    running sum, i.e. |got - exact| <= nb * 2^-24 * sum_b |term_b|."""
    rng = np.random.default_rng([m, n, k, 1])
    w = random_blocks(T.Q4_0, m * k, rng, signed_d=True)
    act = random_activations(n, k, rng)
    got = _testing.gemm(int(T.Q4_0), w, m, act, isa, order="packed")
    by_vec_dot = _testing.gemm(int(T.Q4_0), w, m, act, isa, by_vec_dot=True)
    deq_w = np.stack([_core.dequantize(int(T.Q4_0), w.reshape(m, -1)[r], k) for r in range(m)]).astype(np.float64)
    deq_a = np.stack([_core.dequantize(int(T.Q8_0), _testing.quantize(int(T.Q8_0), act[c]), k)
                      for c in range(n)]).astype(np.float64)
    nb = k // 32
    terms = np.einsum("rbe,cbe->crb", deq_w.reshape(m, nb, 32), deq_a.reshape(n, nb, 32))  # [n][m][nb]
    exact = terms.sum(axis=2)
    bound = (nb + 1) * 2.0**-24 * np.abs(terms).sum(axis=2) + 1e-30
    assert (np.abs(got - exact) <= bound).all(), np.max(np.abs(got - exact) / bound)
    # and close to vec_dot's order (the bound test_gemm.py uses across ISAs)
    loose = 1e-5 * (np.abs(act) @ np.abs(deq_w.T)) + 1e-6
    assert (np.abs(got - by_vec_dot) <= loose).all()


@pytest.mark.parametrize("qtype,isa", [(q, isa) for q in EXACT_PACKED
                                       for isa in isas_under_test(isas_with_gemm(q, "packed"))])
@pytest.mark.parametrize("m,n,k", SHAPES + [(32, 4, 64), (576, 1, 1536), (1024, 2, 640)])
def test_packed_exact_types_are_bit_identical_to_vec_dot(qtype, isa, m, n, k):
    rng = np.random.default_rng([m, n, k, int(qtype)])
    w = random_blocks(qtype, m * k, rng, signed_d=True)
    act = random_activations(n, k, rng)
    got = _testing.gemm(int(qtype), w, m, act, isa, order="packed")
    ref = _testing.gemm(int(qtype), w, m, act, isa, by_vec_dot=True)
    assert got.shape == (n, m)
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), np.abs(got - ref).max()


def test_packed_order_rejects_partial_groups():
    w = np.zeros(20 * 18, np.uint8)
    with pytest.raises(Exception, match="16 rows"):
        _testing.gemm(int(T.Q4_0), w, 20, np.zeros((1, 32), np.float32), "scalar", order="packed")
    with pytest.raises(Exception, match="per-output"):
        _testing.gemm(int(T.Q4_0), np.zeros(16 * 18, np.uint8), 16, np.zeros((1, 32), np.float32), "scalar",
                   by_vec_dot=True, order="packed")


# Logits of a 6-token prompt (the GEMM) and of one more token decoded alone (the GEMV).
_LOGITS = """
import sys, numpy as np
from edgeinfer import Model
m = Model.load(sys.argv[1], n_ctx=64, n_threads=1)
ids = m.tokenize("The capital of France is")
np.save(sys.argv[2], np.concatenate([m.eval_logits(ids), m.eval_logits(ids + [ids[-1]], first=len(ids))]))
"""


@pytest.mark.skipif(_core.isa() not in isas_with_gemm(T.Q4_0, "packed"), reason="this ISA's table does not repack")
def test_smollm2_q4_0_with_and_without_repacking(smollm2_path, tmp_path):
    """The repacked model (the default where the table has gemm_16row_groups) and the model read in
    place (EDGEINFER_REPACK=0, vec_dot order) give nearly the same logits: the same integer sums,
    other float roundings."""
    path = smollm2_requantized(smollm2_path, "Q4_0")
    outs = {}
    for flag in ("1", "0"):
        out = tmp_path / f"logits_{flag}.npy"
        subprocess.run([sys.executable, "-c", _LOGITS, str(path), str(out)], check=True,
                       env=child_env(EDGEINFER_REPACK=flag))
        outs[flag] = np.load(out)
    packed, plain = outs["1"], outs["0"]
    assert packed.shape == plain.shape
    assert not np.array_equal(packed, plain)  # the packed kernels did run (another float order)
    assert (np.argmax(packed, axis=1) == np.argmax(plain, axis=1)).all()
    # Rounding differences grow through 30 layers of 8-bit activation quantization: the scalar and
    # AVX2 tables (both in vec_dot order, other float orders in the float ops) differ by 5.4 % of
    # the largest logit on this prompt; packed vs in place measured 5.9 %.
    rel = np.abs(packed - plain).max() / np.abs(plain).max()
    assert rel < 0.1, rel


# The prompt's logits (the tiled GEMM over the groups), then single-token steps (the GEMV) and a
# 2- and a 3-token step (a GEMV pass per column); RssAnon shows whether the weights were copied.
_DECODE_STEPS = """
import sys, numpy as np
from edgeinfer import Model
m = Model.load(sys.argv[1], n_ctx=64, n_threads=int(sys.argv[3]))
ctx = m._cache
ctx.reset()
ctx.decode(m.tokenize("The capital of France is"), all_logits=True)
out = list(np.array(m._ctx.logits))
for _ in range(4):
    ctx.decode([int(np.argmax(out[-1]))])
    out.append(np.array(m._ctx.logits)[-1])
for extra in ([5, 6], [7, 8, 9]):
    ctx.decode(extra, all_logits=True)
    out += list(np.array(m._ctx.logits))
np.save(sys.argv[2], np.stack(out))
anon = [l for l in open("/proc/self/status") if l.startswith("RssAnon:")][0].split()[1]
print(int(anon) * 1024)
"""


@pytest.mark.skipif(not any(_core.isa() in isas for isas in EXACT_PACKED.values()),
                    reason="this ISA's table repacks no exact type")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("model,copied", [
    ("smollm2_path", 50e6),  # Q4_1: 66 MB of SmolLM2's 98 MB (AVX-512: its 30 MB Q8_0 output matrix too)
    ("gemma3_path", 30e6),   # AVX2: Q5_0, 43 MB of Gemma 3's 253 MB; AVX-512: the 178 MB Q8_0 output matrix
])
def test_exact_types_with_and_without_repacking_are_bit_identical(request, tmp_path, model, copied, threads):
    path = request.getfixturevalue(model)
    outs, anon = {}, {}
    for flag in ("1", "0"):
        out = tmp_path / f"logits_{flag}.npy"
        proc = subprocess.run([sys.executable, "-c", _DECODE_STEPS, str(path), str(out), str(threads)],
                              check=True, capture_output=True, text=True, env=child_env(EDGEINFER_REPACK=flag))
        anon[flag] = int(proc.stdout.split()[-1])
        outs[flag] = np.load(out)
    # the repacked run holds its own copy of those weights: the packed kernels did run
    assert anon["1"] - anon["0"] > copied, anon
    packed, plain = outs["1"], outs["0"]
    assert packed.shape == plain.shape and packed.shape[0] > 10
    assert np.array_equal(packed.view(np.uint32), plain.view(np.uint32)), np.abs(packed - plain).max()
