"""Layers whose weights are i-quants offloaded to the OpenCL device (IQ4_NL, IQ4_XS, and of the
lattice ones a 2-bit and a 3-bit type, IQ2_XXS and IQ3_S): a tiny random llama (rows of 256 and 512
values, so every type fits; written with the core's quantizers, or for the types those need an
importance matrix for, gguf_writing's stand-in blocks) placed on the device whole and in part, its logits compared bit for bit with the CPU path under the AVX2 kernels
the device mirrors (tests/test_opencl_offload.py explains the oracle), teacher-forced on the CPU's
greedy tokens. test_opencl_ops.py checks the matmul itself."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from edgeinfer import _core
from edgeinfer.model import Model
from support.opencl_cpu_reference import reference, teacher_forced, under_avx2
from support.tiny_llama import KQUANTIZABLE

pytestmark = pytest.mark.usefixtures("opencl_cache_in_a_temp_folder")

PROMPTS = [[1, 45, 203, 17, 99, 250, 8, 77, 31, 160], [1, 33, 12, 12, 160, 5]]


@pytest.fixture(scope="module", params=["IQ4_NL", "IQ4_XS", "IQ2_XXS", "IQ3_S", "IQ1_M"])
def iq_model(request, tiny_llama_file):
    """(weight type, a tiny llama with every matrix of that type, the CPU reference)."""
    # A context of 512 positions, as the CPU reference (support/opencl_cpu_reference.py) uses.
    cfg = dataclasses.replace(KQUANTIZABLE, weight_type=request.param, n_ctx_train=512)
    path, _ = tiny_llama_file(cfg)
    ref = reference(path, PROMPTS)
    if ref is None:
        pytest.skip("the device mirrors the x86 AVX2 kernels; this CPU has none to compare with")
    return request.param, path, ref


def test_the_layers_go_to_the_device(iq_model, device_index):
    wtype, path, _ = iq_model
    assert wtype.lower() in _core.opencl_matmul_types()
    model = Model.load(path, n_ctx=512, gpu_layers="all", device=device_index)
    assert model.placement.gpu_layers == (0, 1)
    assert not any("stay on the CPU" in note for note in model.placement.notes)


def test_full_offload_computes_the_cpus_logits(iq_model, device_index):
    wtype, path, ref = iq_model
    model = Model.load(path, n_ctx=512, gpu_layers="all", device=device_index)
    for i, prompt in enumerate(PROMPTS):
        ids = [int(t) for t in ref[f"ids{i}"]]
        got = teacher_forced(model._ctx, prompt, ids)
        np.testing.assert_array_equal(got, ref[f"batch{i}"], err_msg=f"{wtype} prompt {i}")


@pytest.mark.parametrize("spec", ["all", "1"])
def test_a_long_prompts_last_logits_are_the_cpus(iq_model, device_index, spec):
    # Only the last row's logits wanted: the CPU's last layer takes that row alone past its K/V
    # (decoder_layer's r0), and so must the device's. From 8 rows on, the tiled types' batches
    # sum in another order than one row (IQ1_M: some logits one ulp off when the device ran the
    # whole prompt through its last layer).
    wtype, path, ref = iq_model
    prompt = PROMPTS[0]
    assert len(prompt) >= 8
    model = Model.load(path, n_ctx=512, gpu_layers=spec, device=device_index)
    assert model.placement.gpu_layers[-1] == 1  # the last layer
    model._ctx.truncate(0)
    model._ctx.decode(np.array(prompt, np.int32))
    np.testing.assert_array_equal(np.array(model._ctx.logits[0]), ref["batch0"][0], err_msg=f"{wtype} {spec}")


def test_partial_offload_computes_the_cpus_logits(iq_model, device_index):
    # Layer 1 on the device, layer 0 (and the output matrix) on the CPU's AVX2 kernels.
    wtype, path, ref = iq_model
    forced = [[int(t) for t in ref[f"ids{i}"]] for i in range(len(PROMPTS))]
    got = under_avx2(path, PROMPTS, gpu_layers="1", device=device_index, forced=forced)
    for i in range(len(PROMPTS)):
        np.testing.assert_array_equal(got[f"batch{i}"], ref[f"batch{i}"], err_msg=f"{wtype} prompt {i}")
