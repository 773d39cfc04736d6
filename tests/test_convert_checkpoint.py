"""edgeinfer convert without transformers: checkpoints written here with numpy (safetensors in F32
and BF16, one file or shards), the out types, and every way a folder can be wrong."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from edgeinfer import Model
from edgeinfer import _core
from edgeinfer.cli import main as cli_main
from edgeinfer.convert import convert_checkpoint
from edgeinfer.errors import ModelFormatError
from edgeinfer.quantize import QuantizeOptions, quantize_file
from support.hf_tiny import train_sentencepiece, write_tokenizer_config
from support.cli import assert_clean_error, run_main
from support.output_paths import UNWRITABLE, assert_cli_refused, assert_refused_before_any_work, unwritable_output

N_LAYER, D, FF, N_HEAD, N_HEAD_KV = 2, 64, 96, 4, 2


def llama_weights(n_vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    hd = D // N_HEAD
    w = {"model.embed_tokens.weight": rng.normal(0, 0.5, (n_vocab, D)), "model.norm.weight": 1 + rng.normal(0, 0.1, D),
         "lm_head.weight": rng.normal(0, 0.2, (n_vocab, D))}
    for i in range(N_LAYER):
        p = f"model.layers.{i}."
        w |= {p + "input_layernorm.weight": 1 + rng.normal(0, 0.1, D),
              p + "post_attention_layernorm.weight": 1 + rng.normal(0, 0.1, D),
              p + "self_attn.q_proj.weight": rng.normal(0, 0.2, (N_HEAD * hd, D)),
              p + "self_attn.k_proj.weight": rng.normal(0, 0.2, (N_HEAD_KV * hd, D)),
              p + "self_attn.v_proj.weight": rng.normal(0, 0.2, (N_HEAD_KV * hd, D)),
              p + "self_attn.o_proj.weight": rng.normal(0, 0.2, (D, N_HEAD * hd)),
              p + "mlp.gate_proj.weight": rng.normal(0, 0.2, (FF, D)),
              p + "mlp.up_proj.weight": rng.normal(0, 0.2, (FF, D)),
              p + "mlp.down_proj.weight": rng.normal(0, 0.2, (D, FF)),
              p + "self_attn.rotary_emb.inv_freq": np.ones(hd // 2)}
    return {k: v.astype(np.float32) for k, v in w.items()}


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], bf16: bool = False) -> None:
    """The safetensors layout written by hand (so BF16 needs no torch): header, then data."""
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        if bf16 and a.ndim == 2:   # truncate to bfloat16 (the tests compare with the same values)
            raw, dtype = (a.view(np.uint32) >> 16).astype(np.uint16).tobytes(), "BF16"
        else:
            raw, dtype = a.astype(np.float32).tobytes(), "F32"
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory) -> Path:
    return train_sentencepiece(tmp_path_factory.mktemp("spm"))


def make_checkpoint(folder: Path, spm_model: Path, shards: int = 1, bf16: bool = False) -> dict[str, np.ndarray]:
    import sentencepiece as spm

    n_vocab = spm.SentencePieceProcessor(model_file=str(spm_model)).vocab_size()
    weights = llama_weights(n_vocab)
    folder.mkdir(parents=True, exist_ok=True)
    names = list(weights)
    if shards == 1:
        write_safetensors(folder / "model.safetensors", weights, bf16)
    else:
        weight_map = {}
        for i in range(shards):
            shard = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            write_safetensors(folder / shard, {n: weights[n] for n in names[i::shards]}, bf16)
            weight_map |= {n: shard for n in names[i::shards]}
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D, "intermediate_size": FF,
              "num_hidden_layers": N_LAYER, "num_attention_heads": N_HEAD, "num_key_value_heads": N_HEAD_KV,
              "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "vocab_size": n_vocab,
              "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.model").write_bytes(spm_model.read_bytes())
    write_tokenizer_config(folder)
    return weights


def tensor_types(path: Path) -> dict[str, str]:
    return {t["name"]: t["type_name"] for t in _core.GgufFile(str(path)).tensors()}


def test_f32_sharded_and_bf16_checkpoints_convert_to_the_same_values(spm_model, tmp_path):
    weights = make_checkpoint(tmp_path / "one", spm_model)
    make_checkpoint(tmp_path / "sharded", spm_model, shards=3)
    make_checkpoint(tmp_path / "bf16", spm_model, bf16=True)
    files = {name: tmp_path / f"{name}.gguf" for name in ("one", "sharded", "bf16")}
    for name, out in files.items():
        convert_checkpoint(tmp_path / name, out, "f32")
    one, sharded, bf16 = (_core.GgufFile(str(p)) for p in files.values())
    assert len(one.tensors()) == 3 + 9 * N_LAYER   # inv_freq is derived, not stored
    for t in one.tensors():
        assert np.array_equal(one.tensor_data(t["name"]), sharded.tensor_data(t["name"])), t["name"]
    emb = weights["model.embed_tokens.weight"]
    assert np.array_equal(one.tensor_data("token_embd.weight").view(np.float32).reshape(emb.shape), emb)
    truncated = (emb.view(np.uint32) & 0xFFFF0000).view(np.float32)
    assert np.array_equal(bf16.tensor_data("token_embd.weight").view(np.float32).reshape(emb.shape), truncated)


def test_out_types_follow_the_quantize_presets(spm_model, tmp_path):
    make_checkpoint(tmp_path / "hf", spm_model)
    logits = {}
    for outtype in ("f32", "f16", "bf16", "q8_0"):
        out = tmp_path / f"{outtype}.gguf"
        assert cli_main(["convert", str(tmp_path / "hf"), str(out), "--outtype", outtype]) == 0
        types = tensor_types(out)
        assert types["blk.0.attn_norm.weight"] == "f32" and types["output_norm.weight"] == "f32"
        assert types["blk.1.ffn_down.weight"] == outtype
        model = Model.load(out, n_ctx=64, n_threads=1)
        assert model.metadata["general.file_type"] == {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7}[outtype]
        logits[outtype] = model.eval_logits(model.tokenize("The quick brown fox jumps over the lazy dog"))
    scale = np.abs(logits["f32"]).max()
    for outtype, rel in (("f16", 0.01), ("bf16", 0.05)):
        assert np.abs(logits[outtype] - logits["f32"]).max() <= rel * scale, outtype
    # A quantized out type is exactly `edgeinfer quantize` applied to the F32 conversion.
    quantize_file(tmp_path / "f32.gguf", tmp_path / "requantized.gguf", QuantizeOptions("Q8_0"))
    ours, theirs = _core.GgufFile(str(tmp_path / "q8_0.gguf")), _core.GgufFile(str(tmp_path / "requantized.gguf"))
    for t in theirs.tensors():
        assert np.array_equal(ours.tensor_data(t["name"]), theirs.tensor_data(t["name"])), t["name"]


def test_chat_template_special_tokens_and_sampling_defaults_come_along(spm_model, tmp_path):
    make_checkpoint(tmp_path / "hf", spm_model)
    (tmp_path / "hf" / "generation_config.json").write_text(json.dumps(
        {"do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "eos_token_id": [2]}))
    out = tmp_path / "m.gguf"
    convert_checkpoint(tmp_path / "hf", out, "f16")
    meta = Model.load(out, n_ctx=64).metadata
    config = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert meta["tokenizer.chat_template"] == config["chat_template"]
    assert (meta["tokenizer.ggml.bos_token_id"], meta["tokenizer.ggml.eos_token_id"]) == (1, 2)
    assert meta["tokenizer.ggml.add_bos_token"] is True
    assert meta["general.sampling.temp"] == pytest.approx(0.6)
    assert (meta["general.sampling.top_k"], meta["general.sampling.top_p"]) == (20, pytest.approx(0.95))
    assert "general.sampling.min_p" not in meta


def _broken(tmp_path: Path, spm_model: Path, change) -> Path:
    folder = tmp_path / "hf"
    make_checkpoint(folder, spm_model, shards=2)
    change(folder)
    return folder


def _set_config(folder: Path, **values) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(values)
    (folder / "config.json").write_text(json.dumps(config))


def _truncate_shard(folder: Path) -> None:
    shard = sorted(folder.glob("*.safetensors"))[0]
    shard.write_bytes(shard.read_bytes()[:-100])


def _rename_tensor(folder: Path) -> None:
    for shard in folder.glob("*.safetensors"):   # same length: the header stays valid
        shard.write_bytes(shard.read_bytes().replace(b"model.norm.weight", b"model.nrm0.weight", 1))


@pytest.mark.parametrize("change, message", [
    (lambda f: (f / "config.json").unlink(), "no config.json"),
    (lambda f: _set_config(f, architectures=["GPT2LMHeadModel"]), "'GPT2LMHeadModel' cannot be converted yet"),
    (lambda f: _set_config(f, rope_parameters={"rope_type": "dynamic", "factor": 4.0}), "rope scaling 'dynamic'"),
    (lambda f: (f / "model-00002-of-00002.safetensors").unlink(), "shard model-00002-of-00002.safetensors is missing"),
    (_truncate_shard, "outside the file"),
    (_rename_tensor, "model.nrm0.weight has no GGUF name"),
    (lambda f: (f / "tokenizer.model").unlink(), "no tokenizer.model or tokenizer.json"),
    (lambda f: (f / "tokenizer.model").write_bytes(b"not a model"), "not a SentencePiece model"),
])
def test_a_broken_checkpoint_is_a_clear_error_and_leaves_no_file(change, message, spm_model, tmp_path):
    folder = _broken(tmp_path, spm_model, change)
    out = tmp_path / "out" / "m.gguf"
    out.parent.mkdir()
    with pytest.raises(ModelFormatError, match=message):
        convert_checkpoint(folder, out, "f16")
    assert list(out.parent.iterdir()) == []


def test_cli_errors_are_one_line(tmp_path, capsys):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (tmp_path / "hf" / "pytorch_model.bin").write_bytes(b"")
    assert_clean_error(run_main(capsys, "convert", str(tmp_path / "hf"), str(tmp_path / "m.gguf")),
                       "pytorch_model.bin", "safetensors")
    assert_clean_error(run_main(capsys, "convert", str(tmp_path / "missing"), str(tmp_path / "m.gguf")))
    assert not (tmp_path / "m.gguf").exists()


def test_an_existing_output_is_refused_without_force_and_replaced_with_it(spm_model, tmp_path, capsys):
    make_checkpoint(tmp_path / "hf", spm_model)
    out = tmp_path / "m.gguf"
    out.write_bytes(b"keep me")
    assert cli_main(["convert", str(tmp_path / "hf"), str(out)]) == 1
    err = capsys.readouterr().err
    assert err == f"error: {out} already exists; pass --force to overwrite it\n"
    assert out.read_bytes() == b"keep me"
    assert cli_main(["convert", str(tmp_path / "hf"), str(out), "--force"]) == 0
    assert tensor_types(out)["blk.0.ffn_down.weight"] == "f16"


@pytest.mark.parametrize("relative, message", [("hf", "is the input"), *UNWRITABLE])
def test_an_unwritable_output_is_refused_before_any_work(spm_model, tmp_path, capsys, relative, message):
    make_checkpoint(tmp_path / "hf", spm_model)
    out = unwritable_output(tmp_path, relative)
    assert_refused_before_any_work(tmp_path, out, message, lambda never: convert_checkpoint(
        tmp_path / "hf", out, "q8_0", on_plan=never, on_tensor=never, force=True))
    assert_cli_refused(run_main(capsys, "convert", str(tmp_path / "hf"), str(out)), str(out), message)
