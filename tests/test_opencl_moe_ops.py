"""The device's mixture-of-experts feed-forward (DeviceLayerOps::moe_ffn: the F32 router, the
routing kernel, the experts' matmuls by index, their biases and GLU, the weighted sum) against the
CPU's (CpuLayerOps::moe_ffn, layers/cpu_moe.cpp) on random weights, op against op: Qwen 3 MoE's
form (softmax router, top-k renormalized, SwiGLU) and gpt-oss's (a biased router whose top-k logits
are softmaxed, biased experts, the clamped swiglu_oai, MXFP4 experts). Quantized experts must give
the CPU's bits under the AVX2 kernels the device mirrors; F16 experts go through the device's float
matmul, which sums in another order: a bound. Whole models: test_opencl_offload_families.py."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from edgeinfer import _core
from edgeinfer import _testing
from edgeinfer.gpu.devices import opencl_library
from support.quant_rows import random_blocks, rng_for

needs_avx2 = pytest.mark.skipif("avx2" not in _core.available_isas(),
                                reason="the device mirrors the x86 AVX2 kernels")
D, FF = 256, 256  # whole Q4_K super-blocks


@pytest.fixture(scope="module")
def dev(device_index, tmp_path_factory) -> _testing.OpenCLDevice:
    return _testing.OpenCLDevice(device_index, library=opencl_library(),
                                 cache_dir=str(tmp_path_factory.mktemp("opencl-cache")))


def expert_stack(type_: T, n_expert: int, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """n_expert random matrices of `type_` as uint8 [n_expert, rows, row_bytes]: MXFP4 as random
    blocks (the quantizer has no MXFP4 path), the others quantized from N(0, 1) weights."""
    if type_ == T.MXFP4:
        return random_blocks(type_, n_expert * rows * cols, rng).reshape(n_expert, rows, -1)
    w = rng.standard_normal((n_expert * rows, cols)).astype(np.float32)
    raw = w.astype(np.float16).view(np.uint8) if type_ == T.F16 else _core.quantize_rows(int(type_), w)
    return raw.reshape(n_expert, rows, -1)


def make_weights(type_: T, n_expert: int, rng: np.random.Generator, biases: bool) -> dict:
    w = {"type": int(type_), "router": rng.standard_normal((n_expert, D)).astype(np.float32),
         "gate": expert_stack(type_, n_expert, FF, D, rng), "up": expert_stack(type_, n_expert, FF, D, rng),
         "down": expert_stack(type_, n_expert, D, FF, rng)}
    if biases:
        w |= {"router_bias": rng.standard_normal(n_expert).astype(np.float32),
              "gate_bias": rng.standard_normal((n_expert, FF)).astype(np.float32),
              "up_bias": rng.standard_normal((n_expert, FF)).astype(np.float32),
              "down_bias": rng.standard_normal((n_expert, D)).astype(np.float32)}
    return w


QWEN3MOE = dict(norm_weights=True)
GPTOSS = dict(norm_weights=False, softmax_weight=True, swiglu_oai=True)


@needs_avx2
@pytest.mark.parametrize("type_", [T.Q8_0, T.Q4_0, T.Q4_K, T.Q6_K, T.IQ4_NL], ids=lambda t: t.name)
@pytest.mark.parametrize("n_expert", [8, 12])  # the softmax's 8-wide steps, and with a tail
@pytest.mark.parametrize("n", [1, 5, 9])
def test_qwen3moe_experts_are_the_cpus_bits(dev, type_, n_expert, n):
    rng = rng_for(type_, n_expert, n)
    w = make_weights(type_, n_expert, rng, biases=False)
    h = rng.standard_normal((n, D)).astype(np.float32)
    want = _testing.moe_ffn(h, w, 2, **QWEN3MOE, isa="avx2")
    np.testing.assert_array_equal(_testing.moe_ffn(h, w, 2, **QWEN3MOE, device=dev), want)


@needs_avx2
@pytest.mark.parametrize("type_", [T.MXFP4, T.Q8_0], ids=lambda t: t.name)
@pytest.mark.parametrize("n", [1, 7])
def test_gptoss_experts_are_the_cpus_bits(dev, type_, n):
    # Router and expert biases, the top-4 logits softmaxed, the clamped SwiGLU (whose gate and up
    # pass +-7 here: N(0, 1) inputs times N(0, 1) weights over 256 values).
    rng = rng_for(type_, n, 1)
    w = make_weights(type_, 8, rng, biases=True)
    h = rng.standard_normal((n, D)).astype(np.float32)
    want = _testing.moe_ffn(h, w, 4, **GPTOSS, isa="avx2")
    np.testing.assert_array_equal(_testing.moe_ffn(h, w, 4, **GPTOSS, device=dev), want)


@needs_avx2
def test_geglu_experts_are_the_cpus_bits(dev):
    rng = rng_for(3, 3)
    w = make_weights(T.Q8_0, 8, rng, biases=False)
    h = rng.standard_normal((4, D)).astype(np.float32)
    want = _testing.moe_ffn(h, w, 2, gelu=True, isa="avx2")
    np.testing.assert_array_equal(_testing.moe_ffn(h, w, 2, gelu=True, device=dev), want)


@needs_avx2
def test_tied_router_probabilities_pick_the_lower_experts_as_the_cpu(dev):
    # A zero router gives every expert the same probability: the CPU's partial sort takes the
    # lowest indices first; a device that picked others would add other experts' outputs.
    rng = rng_for(4, 4)
    w = make_weights(T.Q8_0, 8, rng, biases=False)
    w["router"][:] = 0.0
    h = rng.standard_normal((3, D)).astype(np.float32)
    want = _testing.moe_ffn(h, w, 3, isa="avx2")
    got = _testing.moe_ffn(h, w, 3, device=dev)
    np.testing.assert_array_equal(got, want)
    others = dict(w, gate=w["gate"][::-1].copy(), up=w["up"][::-1].copy(), down=w["down"][::-1].copy())
    assert not np.array_equal(_testing.moe_ffn(h, others, 3, device=dev), got)


def test_f16_experts_are_within_the_float_matmuls_bound(dev):
    # The device's float matmul sums a row over a work-group (kernels/matmul.cl), and the CPU
    # rounds the activations to F16: test_opencl_ops.py's bound for F16 matmuls, on the sum.
    rng = rng_for(5, 5)
    w = make_weights(T.F16, 8, rng, biases=False)
    h = rng.standard_normal((5, D)).astype(np.float32)
    want = _testing.moe_ffn(h, w, 2).astype(np.float64)
    got = _testing.moe_ffn(h, w, 2, device=dev).astype(np.float64)
    assert np.sum((got - want) ** 2) / np.sum(want ** 2) < 1e-6


def test_bad_shapes_are_errors_not_crashes(dev):
    rng = rng_for(6, 6)
    w = make_weights(T.Q8_0, 4, rng, biases=False)
    h = rng.standard_normal((2, D)).astype(np.float32)
    with pytest.raises(_core.EdgeInferError, match="n_used"):
        _testing.moe_ffn(h, w, 5, device=dev)
    with pytest.raises(_core.EdgeInferError, match="stacks"):
        _testing.moe_ffn(h, dict(w, down=w["gate"][:, :, :-2].copy()), 2, device=dev)
