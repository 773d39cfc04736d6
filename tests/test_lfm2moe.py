"""LFM2-MoE (GGUF architecture lfm2moe: LiquidAI LFM2-8B-A1B's family) end to end on a tiny random
Lfm2MoeForCausalLM checkpoint: LFM2's short convolutions around two attention layers, the first
layer's feed-forward dense and the others' a mixture of 4 experts, 2 a token, routed by sigmoid
with a per-expert selection bias. `edgeinfer convert` writes llama.cpp's keys and tensors;
edgeinfer's logits match transformers' (float32) for whole prompts and token by token; a decode
batch gives each token what it gets alone; llama-perplexity scores a text on the converted file as
edgeinfer does; checkpoints llama.cpp would run differently are refused. (llama.cpp's own
converter's file: tests/test_convert_by_llamacpp.py.)"""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")

from edgeinfer import _core  # noqa: E402
from edgeinfer.cli import main as cli_main  # noqa: E402
from edgeinfer.convert import convert_checkpoint  # noqa: E402
from edgeinfer.errors import ModelFormatError  # noqa: E402
from support.hf_compare import check_against_hf  # noqa: E402
from support.hf_tiny import make_tiny_checkpoint, train_sentencepiece  # noqa: E402

ATTENTION = [False, True, False, True, False]
N_EXPERT, N_USED, FF_EXP = 4, 2, 32


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(the transformers model, its folder)."""
    tmp = tmp_path_factory.mktemp("lfm2moe")
    model = make_tiny_checkpoint(tmp / "hf", "lfm2moe", train_sentencepiece(tmp / "spm"))
    return model, tmp / "hf"


@pytest.fixture(scope="module")
def converted(checkpoint, tmp_path_factory):
    """(the transformers model, edgeinfer's F32 file of it)."""
    model, hf = checkpoint
    path = tmp_path_factory.mktemp("lfm2moe-gguf") / "model.gguf"
    assert cli_main(["convert", str(hf), str(path), "--outtype", "f32"]) == 0
    return model, path


def test_converted_file_has_llamacpps_keys_and_tensors(converted):
    model, path = converted
    f = _core.GgufFile(str(path))
    assert f.get("general.architecture") == "lfm2moe"
    assert list(f.get("lfm2moe.attention.head_count_kv")) == [2 if a else 0 for a in ATTENTION]
    assert (f.get("lfm2moe.expert_count"), f.get("lfm2moe.expert_used_count"),
            f.get("lfm2moe.expert_feed_forward_length")) == (N_EXPERT, N_USED, FF_EXP)
    assert f.get("lfm2moe.leading_dense_block_count") == 1
    assert f.get("lfm2moe.expert_gating_func") == 2   # sigmoid
    tensors = {t["name"]: t for t in f.tensors()}
    assert "blk.0.ffn_gate.weight" in tensors and "blk.0.ffn_gate_inp.weight" not in tensors
    for il in range(1, len(ATTENTION)):
        assert tensors[f"blk.{il}.ffn_gate_exps.weight"]["shape"] == [64, FF_EXP, N_EXPERT]
        assert tensors[f"blk.{il}.ffn_down_exps.weight"]["shape"] == [FF_EXP, 64, N_EXPERT]
        assert tensors[f"blk.{il}.exp_probs_b.bias"]["shape"] == [N_EXPERT]
    # the selection bias is the checkpoint's (not zeros: the test would not see it)
    bias = model.model.layers[1].feed_forward.expert_bias.numpy()
    assert np.abs(bias).max() > 0.05


def test_logits_match_transformers(converted):
    model, path = converted
    check_against_hf(model, path)


def test_the_selection_bias_changes_the_choice(converted, tmp_path):
    """Without the bias (zeroed in a copy of the file) the experts chosen differ somewhere, so the
    logits do: the bias is read and used for the choice."""
    _, path = converted
    f = _core.GgufFile(str(path))
    raw = bytearray(path.read_bytes())
    for t in f.tensors():
        if t["name"].endswith("exp_probs_b.bias"):
            start = f.data_offset + t["offset"]
            raw[start:start + t["nbytes"]] = bytes(t["nbytes"])
    unbiased = tmp_path / "unbiased.gguf"
    unbiased.write_bytes(bytes(raw))
    ids = np.arange(3, 40, dtype=np.int32)
    logits = []
    for p in (path, unbiased):
        ctx = _core.Context(_core.Model(str(p)), n_ctx=64, n_threads=2)
        ctx.decode(ids, all_logits=True)
        logits.append(np.array(ctx.logits))
    assert not np.array_equal(logits[0], logits[1])


def test_a_decode_batch_gives_each_token_what_it_gets_alone(converted):
    model = _core.Model(str(converted[1]))
    ctx = _core.Context(model, n_ctx=64, n_threads=2)
    prompt, new = np.arange(3, 33, dtype=np.int32), np.arange(40, 49, dtype=np.int32)
    ctx.decode(prompt)
    at_prompt = ctx.kv_snapshot(len(prompt))
    alone = []
    for t in new:
        ctx.decode(np.array([t], np.int32))
        alone.append(np.array(ctx.logits[-1]))
    ctx.kv_restore(at_prompt, len(prompt), len(prompt))
    ctx.decode(new, all_logits=True, as_single_steps=True)
    assert np.array_equal(np.array(ctx.logits).view(np.uint32), np.stack(alone).view(np.uint32))


def test_perplexity_is_llama_perplexitys_on_our_file(converted, tmp_path):
    from support.llamacpp_venv import assert_perplexity_is_llamacpps
    assert_perplexity_is_llamacpps(converted[1], tmp_path)


@pytest.mark.parametrize("change,message", [
    ({"norm_topk_prob": False}, "norm_topk_prob"),
    ({"routed_scaling_factor": 2.5}, "routed_scaling_factor"),
    ({"use_expert_bias": False}, "expert_bias"),
])
def test_checkpoints_llamacpp_would_run_differently_are_refused(checkpoint, tmp_path, change, message):
    import shutil
    _, hf = checkpoint
    folder = tmp_path / "hf"
    shutil.copytree(hf, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(change)
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelFormatError, match=message):
        convert_checkpoint(folder, tmp_path / "out.gguf", "f32")


def test_offload_keeps_the_sigmoid_routed_layers_on_the_cpu(converted):
    """The device routes experts by softmax only: the layers with LFM2-MoE's experts stay on the
    CPU and the placement says why; the dense first layer goes, with the CPU's logits."""
    from edgeinfer.gpu.devices import list_devices

    _, path = converted
    if not list_devices()[0]:
        pytest.skip("no OpenCL device")
    from edgeinfer import Model
    m = Model.load(path, n_ctx=64, n_threads=2, gpu_layers="all")
    assert m.placement.gpu_layers == (0,)
    assert "layers 1-4 stay on the CPU: LFM2-MoE's sigmoid routing has no OpenCL path yet." in m.placement.notes
