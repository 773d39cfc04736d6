"""One decoder layer on both backends from the same weights (_testing.layer_on_both_backends: the
CPU's CpuLayerOps, and the offload's upload and run): the parts of gpt-oss's layer that no test
model brings to the device alone, since its expert FFN stays on the CPU (placement.py): attention
sinks (a per-head logit in the softmax's denominator) and the output projection's bias. With an F16
KV cache the device computes the CPU's floats in the CPU's order (tests/test_opencl_offload.py
explains the oracle: the AVX2 kernels), so the rows are equal. (Over a quantized cache the device
attends in float where the CPU rounds Q to 8 bits, a difference the Q4_K activations then amplify:
test_opencl_ops.py checks that attention with sinks against a float64 oracle.)

The batches are a prompt, a chunk whose rows stop at their K/V (a long prompt's earlier chunk, no
logits wanted), a chunk of 9 rows of which only the last goes on past its K/V (the model's last
layer when only the last logits are wanted: decoder_layer's r0), and decode steps;
Q4_K weights, whose batches of 8 rows or more multiply in the tiled order, so that a device that
ran every row through would sum the last row's products in another order than the CPU."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from edgeinfer import _core
from edgeinfer import _testing
from edgeinfer.gpu.devices import opencl_library

N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF = 256, 4, 2, 64, 512
HAS_AVX2 = "avx2" in _core.available_isas()


def layer_weights(rng: np.random.Generator, sinks: bool, bias: bool) -> dict[str, np.ndarray]:
    """A layer's weights as layer_on_both_backends takes them: Q4_K matrices, float vectors."""
    def matrix(rows: int, cols: int) -> np.ndarray:
        w = rng.standard_normal((rows, cols)) / np.sqrt(cols)
        return _core.quantize_rows(int(T.Q4_K), w.astype(np.float32))

    def norm() -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(N_EMBD)).astype(np.float32)

    qw, kvw = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    w = dict(attn_norm=norm(), wq=matrix(qw, N_EMBD), wk=matrix(kvw, N_EMBD), wv=matrix(kvw, N_EMBD),
             wo=matrix(N_EMBD, qw), ffn_norm=norm(), w_gate=matrix(N_FF, N_EMBD), w_up=matrix(N_FF, N_EMBD),
             w_down=matrix(N_EMBD, N_FF))
    if sinks:  # one head's sink far above its scores (it takes nearly all the weight), one far below
        w["attn_sinks"] = np.array([20.0, -20.0, 0.5, -1.0], np.float32)
    if bias:
        w["bo"] = rng.standard_normal(N_EMBD).astype(np.float32)
    return w


def run(weights: dict, device_index: int, window: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    # (rows, r0): a prompt whose every row goes on, a chunk none of whose rows does, a chunk whose
    # last row alone does, decode steps
    shapes = [(12, 0), (3, 3), (9, 8), (1, 0), (1, 0)]
    batches = [(rng.standard_normal((n, N_EMBD)).astype(np.float32), r0) for n, r0 in shapes]
    return _testing.layer_on_both_backends(weights, int(T.Q4_K), N_HEAD, N_HEAD_KV, HEAD_DIM, window=window,
                                           kv_type="f16", batches=batches, device=device_index,
                                           library=opencl_library(), isa="avx2")


@pytest.mark.skipif(not HAS_AVX2, reason="the device mirrors the x86 AVX2 kernels")
@pytest.mark.parametrize("window", [0, 5], ids=["full", "sliding-window"])
def test_a_layer_with_sinks_and_output_bias_computes_the_cpus_rows(device_index, window):
    # gpt-oss alternates sliding-window layers (here 5 positions: the decode steps see only part
    # of the cache) and full ones.
    weights = layer_weights(np.random.default_rng(3), sinks=True, bias=True)
    results = run(weights, device_index, window)
    assert [cpu.shape[0] for cpu, _ in results] == [12, 0, 1, 1, 1]
    for i, (cpu, dev) in enumerate(results):
        np.testing.assert_array_equal(dev, cpu, err_msg=f"batch {i}")
    # Both parts change the layer's output (the comparison above sees them).
    plain = run(layer_weights(np.random.default_rng(3), sinks=False, bias=False), device_index, window)
    assert all(np.abs(cpu - p).max() > 0.1 for (cpu, _), (p, _) in zip(results, plain) if cpu.size)
