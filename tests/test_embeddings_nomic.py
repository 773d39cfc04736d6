"""nomic-bert encoders (nomic-embed-text v1 / v1.5) end to end: a tiny random NomicBertModel
checkpoint (tests/support/tiny_nomic.py: its PyTorch reference, written from the HF repo's
equations since transformers has no such model) converted by `edgeinfer convert` to GGUF
architecture nomic-bert. The hidden states are the reference's within cosine 0.9999 row by row
(RoPE positions restart at 0 in every input), the mean-pooled embeddings too, a batch of inputs
of mixed lengths gives each exactly what it gets alone, what the runtime does not compute is
refused by name, and llama.cpp's converter writes a file that gives the same bytes."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from edgeinfer import Model, _core  # noqa: E402
from edgeinfer.cli import main as cli_main  # noqa: E402
from edgeinfer.convert.architectures import architecture_for  # noqa: E402
from edgeinfer.errors import ModelFormatError  # noqa: E402
from support.tiny_nomic import (N_EMBD, N_LAYER, ROPE_BASE, make_nomic_weights, nomic_config,  # noqa: E402
                                nomic_hidden, save_nomic_folder)

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! 12345 + 678 = 13023?",
    "tabs\tand\nnew lines\n\nand more",
    "Ünïcödé çharacters: naïve café, Straße, ÉCOLE.",
    "unbelievable xyzzyq foxes jumped playing the quick brown fox over the lazy dog again and again",
    "a",
]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(the reference's weights, edgeinfer's F32 file)."""
    tmp = tmp_path_factory.mktemp("nomic")
    weights = make_nomic_weights()
    save_nomic_folder(tmp / "hf", weights)
    assert cli_main(["convert", str(tmp / "hf"), str(tmp / "model.gguf"), "--outtype", "f32"]) == 0
    return weights, tmp / "model.gguf"


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_converted_file_has_llamacpps_keys_and_tensors(converted):
    f = _core.GgufFile(str(converted[1]))
    meta = f.metadata()
    assert meta["general.architecture"] == "nomic-bert"
    assert meta["nomic-bert.pooling_type"] == 1 and meta["nomic-bert.attention.causal"] is False
    assert meta["nomic-bert.rope.freq_base"] == ROPE_BASE and meta["nomic-bert.context_length"] == 2048
    assert meta["nomic-bert.feed_forward_length"] == 96 and meta["tokenizer.ggml.token_type_count"] == 2
    names = {t["name"] for t in f.tensors()}
    assert {"token_embd.weight", "token_types.weight", "token_embd_norm.bias", "blk.0.attn_qkv.weight",
            "blk.2.ffn_gate.weight", "blk.2.ffn_up.weight", "blk.1.layer_output_norm.bias"} <= names
    assert not any("position" in n or n.endswith(("qkv.bias", "output.bias")) for n in names)


def test_hidden_states_and_embeddings_match_the_reference(converted):
    weights, path = converted
    rows = Model.load(path, n_ctx=64, pooling="none").embed(TEXTS, normalize=False)
    m = Model.load(path, n_ctx=64)
    assert m.can_embed and m.pooling == "mean" and m.n_embd_out == N_EMBD
    pooled = m.embed(TEXTS, normalize=False)
    for text, got, emb in zip(TEXTS, rows, pooled):
        ref = nomic_hidden(weights, m.tokenize(text))
        assert got.shape == ref.shape
        assert min(_cos(g, r) for g, r in zip(got, ref)) >= 0.9999, text   # every position's rotation
        assert _cos(emb, ref.mean(axis=0)) >= 0.9999, text


def test_a_batch_of_mixed_lengths_gives_each_what_it_gets_alone(converted):
    path = converted[1]
    alone = np.stack([Model.load(path, n_ctx=64).embed(t)[0] for t in TEXTS])
    for n_batch in (512, 24, 4):   # all packed in one pass; a few at a time; each alone
        together = Model.load(path, n_ctx=64, n_batch=n_batch).embed(TEXTS)
        assert together.tobytes() == alone.tobytes(), n_batch


@pytest.mark.parametrize("change, named", [
    ({"prenorm": True}, "prenorm"), ({"qkv_proj_bias": True}, "qkv_proj_bias"),
    ({"mlp_fc1_bias": True}, "mlp_fc1_bias"), ({"rotary_emb_fraction": 0.5}, "rotary_emb_fraction"),
    ({"rotary_emb_interleaved": True}, "rotary_emb_interleaved"),
    ({"moe_every_n_layers": 2}, "nomic-bert-moe"), ({"activation_function": "gelu"}, "activation_function")])
def test_what_the_runtime_does_not_compute_is_refused_by_name(change, named):
    with pytest.raises(ModelFormatError, match=named):
        architecture_for("NomicBertModel", nomic_config(**change))


def test_llamacpps_converter_writes_the_same_file(tmp_path):
    from support.llamacpp_venv import (WORDPIECE_PRE_DEFAULT_RAW_CONFIG, assert_same_encoder_file, llamacpp_converter,
                                       start_llamacpp_converter)

    converter = llamacpp_converter()
    if converter is None:
        pytest.skip("no llama.cpp source tree (scripts/llamacpp_bin.py unpacks one)")
    save_nomic_folder(tmp_path / "hf", make_nomic_weights())
    run = start_llamacpp_converter(converter, tmp_path / "hf", tmp_path / "theirs.gguf",
                                   run_as=(WORDPIECE_PRE_DEFAULT_RAW_CONFIG, ""))
    assert cli_main(["convert", str(tmp_path / "hf"), str(tmp_path / "ours.gguf"), "--outtype", "f32"]) == 0
    log, _ = run.communicate(timeout=300)
    assert run.returncode == 0, log[-2000:]
    assert_same_encoder_file(tmp_path / "theirs.gguf", tmp_path / "ours.gguf", TEXTS)
