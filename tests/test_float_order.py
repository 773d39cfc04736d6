"""The fast float order (cpu/kernels.h FloatOrder, cpu/repack.h "Float order"): Q4_1, Q5_0, Q8_0,
IQ4_NL (and Q4_K, Q5_K, Q6_K and IQ4_XS, where a table has their kernels) weights repacked into 16-row groups and
summed per block (super-block) exactly, one FMA per block and output (Q4_K and Q5_K: two, the minimums in a chain
of their own, as llama.cpp's repacked Q4_K GEMV).

Every ISA's kernels give the scalar reference's bits for any number of columns; the reference
differs from llama.cpp's order (vec_dot) by float rounding only; a model in the fast order repacks
those types on every table that has the kernels, decodes a batch exactly as single steps (in
test_decode_batch.py), and stays as close to llama.cpp's logits as two float orders can
(scripts/kl_float_order.py measures the quality on eval.txt: docs/PERFORMANCE.md). The suite
itself runs in llama.cpp's order (conftest.py sets EDGEINFER_EXACT=1); the product's default is
the fast order."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf.quants import quantize  # noqa: E402

from edgeinfer import _core  # noqa: E402
from edgeinfer import _testing  # noqa: E402
from support.cli import child_env  # noqa: E402
from support.isas import isas_under_test  # noqa: E402
from support.quant_rows import SCALE_OFFSET, random_blocks  # noqa: E402

FAST_TYPES = [T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS]
# (m rows, n columns, k): one group; several groups; columns off the 8-column panel and several
# panels (prompt chunks unpack a group once); SmolLM2's row lengths.
SHAPES = [(16, 1, 32), (32, 3, 64), (48, 9, 160), (192, 1, 576), (16, 17, 1536), (64, 8, 576), (32, 21, 96)]
# The k- and i-quants' rows are whole 256-element super-blocks: the same cases at such lengths, and a prompt
# chunk's width (several panels).
SHAPES_K = [(16, 1, 256), (32, 3, 512), (48, 9, 768), (192, 1, 1536), (16, 17, 1536), (64, 8, 768), (32, 21, 256),
            (16, 64, 512)]


def shapes(qtype: T) -> list[tuple[int, int, int]]:
    return SHAPES_K if gguf.GGML_QUANT_SIZES[qtype][0] == 256 else SHAPES


def isas_with_fast_kernels(qtype: T) -> list[str]:
    out = []
    for isa in _core.available_isas():
        try:
            block, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
            _testing.gemm(int(qtype), np.zeros(16 * block_bytes, np.uint8), 16, np.zeros((1, block), np.float32), isa,
                          order="packed_fast")
        except Exception:
            continue
        out.append(isa)
    return out


def weights(qtype: T, m: int, k: int, rng: np.random.Generator) -> np.ndarray:
    if qtype == T.Q6_K:  # gguf-py has no Q6_K quantizer: random bytes, every value 0..63 and scale -128..127
        blocks = random_blocks(qtype, m * k, rng, signed_d=True).reshape(m, -1, gguf.GGML_QUANT_SIZES[qtype][1])
        o = SCALE_OFFSET[qtype]
        blocks[1, :, :o - 16] = 0              # a row at the full scale: q - 32 = -32 everywhere, scales -128
        blocks[1, :, o - 16:o] = 0x80
        blocks[2, :, o:o + 2] = 0              # d = 0
        return blocks.reshape(-1)
    w = rng.standard_normal((m, k)).astype(np.float32)
    w[1] = np.where(np.arange(k) % 2 == 0, 1.0, -1.0)   # a row at the full scale: q = +-127 (+-8 / 15 for Q4_1,
                                                          # -32 / 31 for Q6_K)
    w[2] = 0.0                                            # d = 0
    if qtype in (T.IQ4_NL, T.IQ4_XS, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K):  # (gguf-py: no k- or i-quant quantizer; ggml's)
        return _core.quantize_rows(int(qtype), w, 2).reshape(-1)
    return np.frombuffer(quantize(w, qtype).tobytes(), np.uint8)


def activations(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    act = (rng.standard_normal((n, k)) * rng.uniform(0.1, 10, size=(n, 1))).astype(np.float32)
    act[0, :7] = 0.0
    if n > 2:
        act[2] = 0.0
    if n > 1:
        act[1] = np.where(np.arange(k) % 3 == 0, 5.0, -5.0)  # q_a = +-127 against the full-scale row
    return act


def test_the_scalar_table_and_every_x86_table_have_the_fast_kernels():
    for qtype in FAST_TYPES:
        isas = isas_with_fast_kernels(qtype)
        assert "scalar" in isas
        for isa in ("avx2", "avx512"):
            if isa in _core.available_isas():
                assert isa in isas, (qtype.name, isa)


@pytest.mark.parametrize("qtype", FAST_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("isa", [i for i in isas_under_test() if i != "scalar"])
def test_every_isa_gives_the_scalar_references_bits(qtype, isa):
    if isa not in isas_with_fast_kernels(qtype):
        pytest.skip(f"no fast {qtype.name} kernels on {isa} (NEON keeps vec_dot's order)")
    rng = np.random.default_rng(int(qtype))
    for m, n, k in shapes(qtype):
        w, act = weights(qtype, m, k, rng), activations(n, k, rng)
        ref = _testing.gemm(int(qtype), w, m, act, isa="scalar", order="packed_fast")
        got = _testing.gemm(int(qtype), w, m, act, isa=isa, order="packed_fast")
        assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), (m, n, k, float(np.abs(got - ref).max()))


@pytest.mark.parametrize("qtype", FAST_TYPES, ids=lambda t: t.name)
def test_each_output_is_its_own_chain_whatever_the_columns(qtype):
    """A column's outputs do not depend on which columns share the call (decode batches and
    prompt chunks get a single step's bits)."""
    rng = np.random.default_rng(5)
    m, k = 48, 768 if gguf.GGML_QUANT_SIZES[qtype][0] == 256 else 576
    w, act = weights(qtype, m, k, rng), activations(19, k, rng)
    isa = _core.isa()
    together = _testing.gemm(int(qtype), w, m, act, isa=isa, order="packed_fast")
    for c in (0, 1, 7, 8, 18):
        alone = _testing.gemm(int(qtype), w, m, act[c:c + 1], isa=isa, order="packed_fast")
        assert np.array_equal(alone[0].view(np.uint32), together[c].view(np.uint32)), c


@pytest.mark.parametrize("qtype", FAST_TYPES, ids=lambda t: t.name)
def test_the_fast_order_differs_from_llama_cpps_by_rounding_only(qtype):
    """Same integers, other float roundings: within a few float32 ulps of the magnitudes summed."""
    rng = np.random.default_rng(9)
    for m, n, k in shapes(qtype):
        w, act = weights(qtype, m, k, rng), activations(n, k, rng)
        fast = _testing.gemm(int(qtype), w, m, act, isa="scalar", order="packed_fast").astype(np.float64)
        exact = _testing.gemm(int(qtype), w, m, act, isa="scalar", by_vec_dot=True).astype(np.float64)
        dequant = gguf.quants.dequantize(w.reshape(m, -1), qtype).astype(np.float64)
        scale = np.abs(act.astype(np.float64)) @ np.abs(dequant).T     # [n, m]: sum |a| |w|
        assert np.all(np.abs(fast - exact) <= 4 * k / 32 * np.finfo(np.float32).eps * scale + 1e-30), (m, n, k)


@pytest.mark.parametrize("isa", [i for i in isas_under_test() if i != "scalar"])
def test_q4_k_in_the_fast_order_is_llama_cpps_repacked_gemv_for_every_column(isa):
    """Q4_K's fast order is the order of ggml's GEMV over its repacked Q4_K (the x86 tables'
    vec_dot_ggml_repack): a decode step gives llama.cpp's bits, and every column of a prompt the
    same."""
    if isa not in isas_with_fast_kernels(T.Q4_K):
        pytest.skip(f"no fast Q4_K kernels on {isa}")
    rng = np.random.default_rng(23)
    for m, n, k in SHAPES_K:
        w, act = weights(T.Q4_K, m, k, rng), activations(n, k, rng)
        gemv = _testing.gemm(int(T.Q4_K), w, m, act, isa=isa, order="small_batch_repacked", by_vec_dot=True)
        for table in ("scalar", isa):
            fast = _testing.gemm(int(T.Q4_K), w, m, act, isa=table, order="packed_fast")
            assert np.array_equal(fast.view(np.uint32), gemv.view(np.uint32)), (table, m, n, k)


def test_a_model_says_its_order_and_repacks_for_it(smollm2_path):
    fast, exact = _core.Model(str(smollm2_path), exact=False), _core.Model(str(smollm2_path), exact=True)
    assert (fast.float_order, exact.float_order) == ("fast", "llama.cpp")
    prompt = np.arange(100, 140, dtype=np.int32)
    out = {}
    for name, model in (("fast", fast), ("exact", exact)):
        ctx = _core.Context(model, n_ctx=64, n_threads=2)
        ctx.decode(prompt, all_logits=True)
        out[name] = np.array(ctx.logits)
    # Other roundings, amplified by the int8 activations downstream: close, not equal.
    assert not np.array_equal(out["fast"], out["exact"])
    assert np.abs(out["fast"] - out["exact"]).max() < 0.1 * np.abs(out["exact"]).max()


CHILD = "from edgeinfer import _core; import sys; print(_core.Model(sys.argv[1]).float_order)"


@pytest.mark.parametrize("env, order", [({"EDGEINFER_EXACT": "1"}, "llama.cpp"), ({"EDGEINFER_EXACT": ""}, "fast"),
                                        ({"EDGEINFER_EXACT": "0"}, "fast")])
def test_the_default_is_fast_unless_edgeinfer_exact_is_1(tiny_llama_path, env, order):
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tiny_llama_path)], env=child_env(**env), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == order


def test_bench_json_names_the_order(tiny_llama_path):
    proc = subprocess.run([sys.executable, "-m", "edgeinfer", "bench", str(tiny_llama_path), "-p", "8", "-n", "2", "-r", "1",
                           "--json"], env=child_env(EDGEINFER_EXACT=""), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert {r["float_order"] for r in json.loads(proc.stdout)} == {"fast"}
