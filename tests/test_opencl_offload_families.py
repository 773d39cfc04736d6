"""Offload of the architectures whose layer is the llama layer with extras, now that every
architecture runs the one layer (layers/decoder_layer.h) on either backend: Qwen 2 (Q/K/V
biases), Qwen 3 (per-head Q and K norms), Phi-3 (fused QKV and gate/up projections, Q scaled
before attention, LongRoPE's factors and attention factor), Qwen 3 with YaRN, SmolLM3 (layer 3 unroped), Granite
(attention and residual multipliers; the embedding and logits ones are the CPU's), Qwen 3 MoE (a
mixture of experts routed on the device: its op against the CPU's in test_opencl_moe_ops.py) and
gpt-oss (attention sinks, biases, sliding-window layers, softmax-weighted experts with swiglu_oai). Tiny checkpoints made with
transformers, converted and quantized to Q8_0 with edgeinfer; full and partial offload compared
bit for bit with the CPU path under the AVX2 kernels the device mirrors (tests/test_opencl_offload.py
explains the oracle), teacher-forced on the CPU's greedy tokens."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from edgeinfer.cli import main as cli_main  # noqa: E402
from edgeinfer.model import Model  # noqa: E402
from support.hf_tiny import make_tiny_checkpoint, train_sentencepiece  # noqa: E402
from support.opencl_cpu_reference import reference, teacher_forced, under_avx2  # noqa: E402

pytestmark = pytest.mark.usefixtures("opencl_cache_in_a_temp_folder")

N_LAYER = 4
PROMPTS = [[1, 45, 203, 17, 99, 250, 8, 77, 31, 160], [1, 300, 12, 12, 160, 5]]
LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0,
            "long_factor": [1.0 + 0.5 * i for i in range(8)], "short_factor": [1.0 + 0.1 * i for i in range(8)]}
YARN = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64, "rope_theta": 10000.0}
FAMILIES = {   # contexts of 512 positions, as the CPU reference (support/opencl_cpu_reference.py) uses
    "qwen2": ("qwen2", dict(max_position_embeddings=512)),
    "qwen3": ("qwen3", dict(max_position_embeddings=512)),
    # A context of 512 over an original 64 positions: the long factors, and cos / sin scaled.
    "phi3": ("phi3", dict(max_position_embeddings=1024, original_max_position_embeddings=64,
                          rope_parameters=LONGROPE)),
    "smollm3": ("smollm3", dict(max_position_embeddings=512)),
    "granite": ("granite", dict(max_position_embeddings=512)),
    # 4 experts of width 32, 2 a token (support/hf_tiny.py): a partial offload crosses routed layers
    "qwen3moe": ("qwen3moe", dict(max_position_embeddings=512)),
    # attention sinks, biases on Q/K/V/O, the router and the experts, sliding-window layers, YaRN
    "gptoss": ("gptoss", dict(max_position_embeddings=512)),
    # YaRN over an original 64 positions: the mixed angles, and cos / sin scaled.
    "qwen3-yarn": ("qwen3", dict(max_position_embeddings=512, rope_parameters=YARN)),
}


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    return train_sentencepiece(tmp_path_factory.mktemp("spm"))


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, spm_model, tmp_path_factory):
    """(name, a Q8_0 GGUF of a tiny random model of the family, the CPU reference)."""
    tmp = tmp_path_factory.mktemp(request.param)
    family, overrides = FAMILIES[request.param]
    make_tiny_checkpoint(tmp / "hf", family, spm_model, num_hidden_layers=N_LAYER, **overrides)
    f32, q8 = tmp / "f32.gguf", tmp / "q8_0.gguf"
    assert cli_main(["convert", str(tmp / "hf"), str(f32), "--outtype", "f32"]) == 0
    assert cli_main(["quantize", str(f32), str(q8), "Q8_0"]) == 0
    ref = reference(q8, PROMPTS)
    if ref is None:
        pytest.skip("the device mirrors the x86 AVX2 kernels; this CPU has none to compare with")
    return request.param, q8, ref


def test_full_offload_computes_the_cpus_logits(family, device_index):
    name, path, ref = family
    model = Model.load(path, n_ctx=512, gpu_layers="all", device=device_index)
    assert model.placement.gpu_layers == tuple(range(N_LAYER))
    for i, prompt in enumerate(PROMPTS):
        ids = [int(t) for t in ref[f"ids{i}"]]
        got = teacher_forced(model._ctx, prompt, ids)
        np.testing.assert_array_equal(got, ref[f"batch{i}"], err_msg=f"{name} prompt {i}")


@pytest.mark.parametrize("spec", ["2", "0,3"])
def test_partial_offload_computes_the_cpus_logits(family, device_index, spec):
    name, path, ref = family
    forced = [[int(t) for t in ref[f"ids{i}"]] for i in range(len(PROMPTS))]
    # The CPU layers must run the AVX2 kernels the device mirrors: a child process where the
    # best ISA is another one.
    got = under_avx2(path, PROMPTS, gpu_layers=spec, device=device_index, forced=forced)
    for i in range(len(PROMPTS)):
        np.testing.assert_array_equal(got[f"batch{i}"], ref[f"batch{i}"], err_msg=f"{name} {spec} prompt {i}")
