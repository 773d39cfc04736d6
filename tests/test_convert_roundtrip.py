"""Real models through the converter and back: SmolLM2 (and Gemma 3) dequantized to an HF-style
checkpoint (support/gguf_to_hf.py: hand-written HF names, F32 safetensors in two shards, tokenizer files
rebuilt from the GGUF vocabulary), converted by `edgeinfer convert` to F32, must give the
dequantized original's tensors and logits, and its tokenizer metadata. The BPE tokenizer rebuilt
with SmolLM's pre-tokenizer must be identified as llama.cpp's "smollm" by its check hash and give
the HF tokenizer's ids."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from edgeinfer import Model  # noqa: E402
from edgeinfer.cli import main as cli_main  # noqa: E402
from edgeinfer.convert.pretokenizer import check_hash  # noqa: E402
from edgeinfer.errors import ModelFormatError  # noqa: E402
from support.gguf_to_hf import GGUFModel, write_hf_checkpoint  # noqa: E402
from support.hf_tiny import SAMPLE_TEXTS  # noqa: E402

pytestmark = pytest.mark.realmodel

PROMPTS = ["The capital of France is", "def fibonacci(n):\n    if n < 2:\n        return n\n"]
TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                  "tokenizer.ggml.scores", "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
                  "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
                  "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token",
                  "tokenizer.ggml.add_space_prefix", "tokenizer.chat_template")


@pytest.fixture(scope="module")
def smollm2_hf(smollm2_f32_path, tmp_path_factory) -> Path:
    """From the Q4_1 file dequantized to F32 by gguf-py (conftest), which keeps every metadata
    entry of the original."""
    folder = tmp_path_factory.mktemp("smollm2-hf")
    write_hf_checkpoint(smollm2_f32_path, folder)
    return folder


@pytest.fixture(scope="module")
def smollm2_converted(smollm2_hf, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("smollm2-gguf") / "smollm2.f32.gguf"
    assert cli_main(["convert", str(smollm2_hf), str(out), "--outtype", "f32"]) == 0
    return out


def test_smollm2_round_trip_tensors_and_metadata(smollm2_path, smollm2_f32_path, smollm2_converted):
    original, converted = GGUFModel(smollm2_f32_path), GGUFModel(smollm2_converted)
    assert GGUFModel(smollm2_path).get("tokenizer.ggml.merges") == original.get("tokenizer.ggml.merges")
    ours = {t["name"]: t for t in converted.file.tensors()}
    theirs = {t["name"]: t for t in original.file.tensors()}
    assert sorted(ours) == sorted(theirs)
    for name, t in theirs.items():   # the same F32 values, bit for bit
        assert (ours[name]["shape"], ours[name]["type"]) == (t["shape"], t["type"]), name
        assert np.array_equal(converted.raw(name), original.raw(name)), name
    for key in TOKENIZER_KEYS:
        assert converted.get(key) == original.get(key), key
    for key in ("block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count",
                "attention.head_count_kv", "rope.freq_base", "attention.layer_norm_rms_epsilon",
                "rope.dimension_count", "vocab_size"):
        assert converted.a(key) == original.a(key), key


def test_smollm2_round_trip_logits(smollm2_f32_path, smollm2_converted):
    reference = Model.load(smollm2_f32_path, n_ctx=256, n_threads=2)
    ours = Model.load(smollm2_converted, n_ctx=256, n_threads=2)
    for prompt in PROMPTS:
        ids = reference.tokenize(prompt)
        assert ours.tokenize(prompt) == ids
        np.testing.assert_array_equal(ours.eval_logits(ids), reference.eval_logits(ids))


def test_bpe_pre_tokenizer_identified_by_check_hash(smollm2_hf):
    assert check_hash(smollm2_hf / "tokenizer.json") == \
        "855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249"   # llama.cpp's "smollm"


def test_converted_bpe_ids_match_hf_tokenizer(smollm2_hf, smollm2_converted, load_fixture):
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(smollm2_hf / "tokenizer.json"))
    ours = Model.load(smollm2_converted, n_ctx=64)
    texts = SAMPLE_TEXTS + [c["text"] for c in load_fixture("tokenizer_smollm2")["cases"] if not c["parse_special"]]
    assert len(texts) > 20
    for text in texts:
        assert ours.tokenize(text, add_special=False, parse_special=True) == hf.encode(text, add_special_tokens=False).ids, text


def test_unknown_pre_tokenizer_is_a_clear_error(smollm2_hf, tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    for f in smollm2_hf.iterdir():   # the same checkpoint, but a space is put before the text
        (folder / f.name).symlink_to(f)
    tj = json.loads((smollm2_hf / "tokenizer.json").read_text(encoding="utf-8"))
    tj["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = True
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    from edgeinfer.convert import convert_checkpoint

    with pytest.raises(ModelFormatError, match="pre-tokenizer is not one llama.cpp knows"):
        convert_checkpoint(folder, tmp_path / "out.gguf", "f32")
    assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".*partial"))


@pytest.fixture(scope="module")
def gemma3_converted(gemma3_f32_path, tmp_path_factory) -> Path:
    """Gemma 3 270M (dequantized to F32) -> HF checkpoint with a SentencePiece tokenizer.model
    -> edgeinfer convert -> F32 GGUF. The HF folder is deleted once converted (1 GB)."""
    import shutil

    folder = tmp_path_factory.mktemp("gemma3-hf")
    write_hf_checkpoint(gemma3_f32_path, folder)
    out = tmp_path_factory.mktemp("gemma3-gguf") / "gemma3.f32.gguf"
    assert cli_main(["convert", str(folder), str(out), "--outtype", "f32"]) == 0
    shutil.rmtree(folder)
    return out


def test_gemma3_round_trip(gemma3_f32_path, gemma3_converted):
    original, converted = GGUFModel(gemma3_f32_path), GGUFModel(gemma3_converted)
    ours = {t["name"]: t for t in converted.file.tensors()}
    theirs = {t["name"]: t for t in original.file.tensors()}
    assert sorted(ours) == sorted(theirs)
    for name, t in theirs.items():
        a, b = converted.raw(name).view(np.float32), original.raw(name).view(np.float32)
        if name.endswith("norm.weight"):   # HF stores w, the GGUF 1 + w: (w - 1) + 1 rounds in F32
            np.testing.assert_allclose(a, b, rtol=0, atol=np.spacing(np.abs(b)).max(), err_msg=name)
        else:
            assert np.array_equal(a, b), name
    for key in TOKENIZER_KEYS:
        assert converted.get(key) == original.get(key), key
    for key in ("block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count",
                "attention.head_count_kv", "attention.key_length", "attention.value_length", "rope.freq_base",
                "attention.sliding_window", "attention.layer_norm_rms_epsilon"):
        assert converted.a(key) == original.a(key), key

    reference = Model.load(gemma3_f32_path, n_ctx=256, n_threads=2)
    model = Model.load(gemma3_converted, n_ctx=256, n_threads=2)
    for prompt in PROMPTS:
        ids = reference.tokenize(prompt)
        assert model.tokenize(prompt) == ids
        ref = reference.eval_logits(ids)
        np.testing.assert_allclose(model.eval_logits(ids), ref, rtol=0, atol=1e-3 * np.abs(ref).max())
