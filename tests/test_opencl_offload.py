"""Layers offloaded to the OpenCL device (PoCL here) in a real forward pass: SmolLM2 (llama) with
--gpu-layers all, 4 and 0-5,12 against llama.cpp's reference data, prefix reuse with the device
KV cache, and the clear errors for what does not offload yet.

The oracle is llama.cpp's run of the same weights dequantized to F32 (fixtures REFERENCE.md:
`extra_same_prompts_other_files_t2.smollm2_f32`), not our CPU path: the device multiplies float
activations with dequantized weights, as llama.cpp's F32 path does, while the CPU path (like
llama.cpp on the Q4_1 file) rounds activations to 8 bits first, which alone moves logits by
0.2-0.8. What is not on the device (token embeddings and output matrix, Q8_0 in this file) is
still computed from the quantized file, so the device path is close to F32, not equal to it.
Decoding on PoCL takes ~1 s a token on this machine, so the greedy check runs one prompt.
"""
from __future__ import annotations

import numpy as np
import pytest

from edgeinfer import _core
from edgeinfer.model import Model
from test_opencl_ops import device_index  # noqa: F401  (the skip-or-fail device fixture)

pytestmark = pytest.mark.realmodel

# Measured on PoCL: the device path's top-20 logits at each prompt's last position are within
# 0.07-0.13 of llama.cpp's F32 run (the CPU path: 0.22-0.77).
TOP20_VS_F32 = 0.25
# A partial offload mixes both paths, so it carries the 8-bit activation error of its CPU layers:
# REFERENCE.md measures 0.2-0.7 for llama.cpp's quantized path, our CPU path 0.22-0.77 here.
TOP20_MIXED_VS_F32 = 1.0


@pytest.fixture(scope="module")
def greedy_fixture(load_fixture):
    return load_fixture("greedy_llamacpp_smollm2.json")


@pytest.fixture(scope="module")
def f32_runs(greedy_fixture):
    return {r["name"]: r for r in greedy_fixture["extra_same_prompts_other_files_t2"]["smollm2_f32"]}


@pytest.fixture(scope="module")
def offloaded(smollm2_path, device_index):  # noqa: F811
    return Model.load(smollm2_path, n_ctx=512, gpu_layers="all", device=device_index)


@pytest.fixture(scope="module")
def on_cpu(smollm2_path):
    return Model.load(smollm2_path, n_ctx=512)


def last_logits(model: Model, ids: list[int]) -> np.ndarray:
    model._ctx.truncate(0)
    model._ctx.decode(np.array(ids, np.int32))
    return np.array(model._ctx.logits[0])


def test_full_offload_places_every_layer_on_the_device(offloaded):
    plan = offloaded.placement
    assert plan.gpu_layers == tuple(range(30)) and plan.ranges == [(0, 29)]
    assert plan.gpu_weight_bytes > 0 and plan.cpu_kv_bytes == 0


def test_full_offload_logits_are_near_llama_cpp_f32(offloaded, on_cpu, greedy_fixture, f32_runs):
    for r in greedy_fixture["results"]:
        f32 = f32_runs[r["name"]]
        top, want = f32["prompt_last_top20_ids"], np.array(f32["prompt_last_top20_logits"])
        got = last_logits(offloaded, r["prompt_ids"])
        assert np.abs(got[top] - want).max() < TOP20_VS_F32, r["name"]
        # Closer to F32 than the CPU path, whose activations are rounded to 8 bits.
        cpu = last_logits(on_cpu, r["prompt_ids"])
        assert np.abs(got[top] - want).max() < np.abs(cpu[top] - want).max(), r["name"]


@pytest.mark.parametrize("spec", ["4", "0-5,12"])
def test_partial_offload_is_within_the_quantized_paths_distance_of_f32(smollm2_path, device_index, on_cpu,  # noqa: F811
                                                            greedy_fixture, f32_runs, spec):
    model = Model.load(smollm2_path, n_ctx=512, gpu_layers=spec, device=device_index)
    assert model.placement.ranges == ([(26, 29)] if spec == "4" else [(0, 5), (12, 12)])
    for r in greedy_fixture["results"][:3]:
        f32 = f32_runs[r["name"]]
        top, want = f32["prompt_last_top20_ids"], np.array(f32["prompt_last_top20_logits"])
        got, cpu = last_logits(model, r["prompt_ids"]), last_logits(on_cpu, r["prompt_ids"])
        assert np.abs(cpu[top] - want).max() < TOP20_MIXED_VS_F32  # the bound holds for the CPU path
        assert np.abs(got[top] - want).max() < TOP20_MIXED_VS_F32, r["name"]
        assert got.argmax() == cpu.argmax()


def test_full_offload_greedy_matches_llama_cpp_f32_for_32_tokens(offloaded, greedy_fixture, f32_runs):
    r = next(r for r in greedy_fixture["results"] if r["name"] == "plain_fib")
    ctx = offloaded._ctx
    ctx.truncate(0)
    ctx.decode(np.array(r["prompt_ids"], np.int32))
    ids = []
    for _ in range(32):  # one decode call per token: the device KV cache grows one row at a time
        ids.append(int(np.argmax(ctx.logits[0])))
        ctx.decode(np.array(ids[-1:], np.int32))
    assert ids == f32_runs["plain_fib"]["gen_ids"][:32]


def test_prefix_reuse_continues_from_the_device_cache(offloaded, greedy_fixture):
    ids = greedy_fixture["results"][2]["prompt_ids"]
    full = last_logits(offloaded, ids)
    ctx = offloaded._ctx
    ctx.truncate(0)
    ctx.decode(np.array(ids + [1, 2, 3], np.int32))  # a different ending, then back to the prefix
    ctx.truncate(len(ids) - 2)
    ctx.decode(np.array(ids[-2:], np.int32))
    # Not bit-equal: one token goes through the mat-vec kernel, several through mat-mat.
    np.testing.assert_allclose(np.array(ctx.logits[0]), full, atol=2e-3)


def test_what_does_not_offload_yet_is_a_clear_error(smollm2_path, gemma3_path, device_index):  # noqa: F811
    with pytest.raises(_core.EdgeInferError, match="gemma3 architecture cannot offload layers to OpenCL yet"):
        Model.load(gemma3_path, n_ctx=256, gpu_layers="2", device=device_index)
    with pytest.raises(_core.EdgeInferError, match="F16 KV cache; a q8_0/f16 cache is not supported"):
        Model.load(smollm2_path, n_ctx=256, gpu_layers="2", cache_type_k="q8_0", device=device_index)
    model = Model.load(smollm2_path, n_ctx=256, gpu_layers="2", device=device_index)
    model._ctx.decode(np.array([1, 2, 3], np.int32))
    with pytest.raises(_core.EdgeInferError, match="not supported with layers offloaded to OpenCL yet"):
        model._ctx.kv_snapshot(3)
    with pytest.raises(_core.EdgeInferError, match="context shift is not supported with layers offloaded"):
        model._ctx.shift(1, 1)


def test_no_library_warns_and_runs_on_the_cpu_or_fails_with_require_gpu(smollm2_path, monkeypatch):
    monkeypatch.setenv("EDGEINFER_OPENCL_LIBRARY", "/nonexistent/libOpenCL.so")
    with pytest.warns(UserWarning, match="no OpenCL library .* running on the CPU"):
        model = Model.load(smollm2_path, n_ctx=256, gpu_layers="all")
    assert model.placement.gpu_layers == ()
    model._ctx.decode(np.array([1, 2, 3], np.int32))
    with pytest.raises(_core.EdgeInferError, match="offload requested"):
        Model.load(smollm2_path, n_ctx=256, gpu_layers="all", require_gpu=True)


def test_run_prints_where_the_layers_went(smollm2_path, device_index):  # noqa: F811
    from test_cli import run_cli

    proc = run_cli("run", str(smollm2_path), "-p", "The capital of France is", "-n", "4", "--temp", "0",
                   "-c", "256", "--gpu-layers", "4", "--device", str(device_index))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(" Paris")
    lines = [line for line in proc.stderr.splitlines() if line.startswith("offload: ")]
    assert lines[0].startswith("offload: OpenCL device 0 (") and "layers 26-29 (4 of 30)" in lines[0]
    assert lines[1].startswith("offload: CPU: layers 0-25 (26 of 30)")
