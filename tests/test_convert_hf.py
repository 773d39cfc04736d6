"""edgeinfer convert against Hugging Face transformers: tiny random-weight checkpoints of each
family are saved with save_pretrained, converted to F32 with the `edgeinfer convert` command, and
edgeinfer's logits must match transformers' for a whole prompt (prefill) and token by token
(decode), including the RoPE scaling variants and Gemma 3's own base for its sliding-window
layers. The converted SentencePiece vocabulary must give sentencepiece's ids, and a Gemma 3 one
transformers' Gemma tokenizer's."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")

from edgeinfer import Model  # noqa: E402
from edgeinfer.cli import main as cli_main  # noqa: E402
from support.hf_compare import PROMPTS, check_against_hf  # noqa: E402
from support.hf_tiny import SAMPLE_TEXTS, gemma_hf_tokenizer, make_tiny_checkpoint, train_sentencepiece  # noqa: E402


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory) -> Path:
    return train_sentencepiece(tmp_path_factory.mktemp("spm"))


def convert(folder: Path, out: Path, outtype: str = "f32") -> Path:
    assert cli_main(["convert", str(folder), str(out), "--outtype", outtype]) == 0
    return out


VARIANTS = {
    "llama": ("llama", {}),
    "llama-linear-rope": ("llama", {"rope_parameters": {"rope_type": "linear", "factor": 4.0,
                                                         "rope_theta": 10000.0}}),
    "llama3-rope": ("llama", {"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 32,
                                                   "rope_theta": 500000.0}}),
    "llama-tied": ("llama", {"tie_word_embeddings": True}),
    "mistral-head-dim": ("mistral", {}),
    "qwen2": ("qwen2", {}),
    "qwen2-linear-rope": ("qwen2", {"rope_parameters": {"rope_type": "linear", "factor": 2.0,
                                                         "rope_theta": 1000000.0}}),
    "qwen3": ("qwen3", {}),
    "phi3": ("phi3", {}),
    "gemma3": ("gemma3", {}),
    "smollm3": ("smollm3", {}),
    "granite": ("granite", {}),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_converted_logits_match_transformers(variant, spm_model, tmp_path):
    family, overrides = VARIANTS[variant]
    model = make_tiny_checkpoint(tmp_path / "hf", family, spm_model, **overrides)
    gguf_path = convert(tmp_path / "hf", tmp_path / "model.gguf")
    check_against_hf(model, gguf_path)


def test_phi3_longrope_matches_transformers(spm_model, tmp_path):
    """LongRoPE: short factors while the context fits the original 64 positions, long ones
    beyond. llama.cpp (and edgeinfer) choose once per context size, transformers per sequence
    length: a 64-position context against prompts under 64 tokens (prefill and decode), and a
    256-position context against a 131-token prompt (prefill), pick the same factors."""
    rope = {"rope_type": "longrope", "rope_theta": 10000.0,
            "long_factor": [1.0 + 0.5 * i for i in range(8)], "short_factor": [1.0 + 0.1 * i for i in range(8)]}
    model = make_tiny_checkpoint(tmp_path / "hf", "phi3", spm_model, max_position_embeddings=256,
                                 original_max_position_embeddings=64, rope_parameters=rope)
    gguf_path = convert(tmp_path / "hf", tmp_path / "model.gguf")
    meta = Model.load(gguf_path, n_ctx=64).metadata
    assert meta["phi3.rope.scaling.attn_factor"] == pytest.approx((1 + np.log(4) / np.log(64)) ** 0.5)
    check_against_hf(model, gguf_path, n_ctx=64, prompts=PROMPTS[:1])
    check_against_hf(model, gguf_path, n_ctx=256, prompts=PROMPTS[1:], decode=False)


def test_sentencepiece_ids_match(spm_model, tmp_path):
    import sentencepiece as spm

    make_tiny_checkpoint(tmp_path / "hf", "llama", spm_model)
    em = Model.load(convert(tmp_path / "hf", tmp_path / "model.gguf"), n_ctx=256)
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    assert em.metadata["tokenizer.ggml.model"] == "llama"
    for text in SAMPLE_TEXTS:
        assert em.tokenize(text) == [sp.bos_id()] + sp.encode(text), text


def test_gemma3_tokenizer_puts_no_space_before_the_text(tmp_path):
    """Gemma's tokenizer_config.json says nothing about a prefix space, and GGUF readers (ours,
    llama.cpp's) default a missing add_space_prefix to true for SentencePiece: the file must say
    false, or every text and every chat turn gets an extra token."""
    spm_model = train_sentencepiece(tmp_path / "spm", add_dummy_prefix=False)   # as Gemma's
    make_tiny_checkpoint(tmp_path / "hf", "gemma3", spm_model)
    assert "add_prefix_space" not in json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    em = Model.load(convert(tmp_path / "hf", tmp_path / "model.gguf"), n_ctx=256)
    assert em.metadata["tokenizer.ggml.add_space_prefix"] is False
    hf = gemma_hf_tokenizer(spm_model)
    for text in ["Hello world", *SAMPLE_TEXTS]:
        assert em.tokenize(text) == hf(text)["input_ids"], text
    turn = "</s>user: Hello world\n"   # nor after a special token
    assert em.tokenize(turn, parse_special=True) == hf(turn)["input_ids"]


def test_gemma3_local_rope_base_is_written_and_used(spm_model, tmp_path):
    """rope_local_base_freq (the sliding-window layers' RoPE base) away from its default 10000:
    the file carries it and the logits follow transformers'."""
    model = make_tiny_checkpoint(tmp_path / "hf", "gemma3", spm_model, rope_local_base_freq=50000.0)
    gguf_path = convert(tmp_path / "hf", tmp_path / "model.gguf")
    assert Model.load(gguf_path, n_ctx=256).metadata["gemma3.rope.freq_base_swa"] == 50000.0
    check_against_hf(model, gguf_path)


GEMMA3_SHAPE = {"num_hidden_layers": 6, "hidden_size": 64, "num_attention_heads": 4, "head_dim": 32}


@pytest.mark.parametrize("cfg, base", [
    ({"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 20000.0}}}, 20000.0),
    ({"rope_theta": 1e6, "rope_local_base_freq": 30000.0}, 30000.0),   # transformers 4's config.json
    ({"rope_theta": 1e6}, 10000.0),
])
def test_gemma3_local_rope_base_from_either_config_spelling(cfg, base):
    from edgeinfer.convert.decoders import Gemma3

    assert Gemma3({**GEMMA3_SHAPE, **cfg}).local_rope_base() == base


def test_gemma3_scaled_local_rope_is_refused():
    from edgeinfer.convert.decoders import Gemma3
    from edgeinfer.errors import ModelFormatError

    rope = {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 10000.0}}
    with pytest.raises(ModelFormatError, match="sliding-window"):
        Gemma3({**GEMMA3_SHAPE, "rope_parameters": rope}).local_rope_base()


@pytest.mark.parametrize("cfg, match", [
    ({"no_rope_layers": [1, 1, 0, 1, 1]}, "no_rope_layers"),            # NoPE on another layer
    ({"no_rope_layer_interval": 2}, "no_rope_layers"),
    ({"use_sliding_window": True, "sliding_window": 16}, "sliding window"),
    ({"attention_bias": True}, "attention_bias"),
    ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "rope_theta": 1e6}}, "llama3"),
])
def test_smollm3_configs_gguf_cannot_express_are_refused(cfg, match):
    """llama.cpp's loader skips RoPE on every fourth layer, whatever the file says (no key carries
    it), and passes its graph no rope factors: other patterns are refused, not run wrong."""
    from edgeinfer.convert.decoders import SmolLM3
    from edgeinfer.errors import ModelFormatError

    shape = {"num_hidden_layers": 5, "hidden_size": 64, "num_attention_heads": 4}
    assert SmolLM3(shape).name == "smollm3"
    with pytest.raises(ModelFormatError, match=match):
        SmolLM3({**shape, **cfg})


def test_granite_writes_transformers_default_multipliers(spm_model, tmp_path):
    """A config.json without the multipliers means transformers' 1.0 for each, an attention scale
    of 1 included: the file says so (llama.cpp's converter would leave them out, and its loader
    then scale attention by 1/sqrt(head_dim)). The multipliers' effect on the logits is checked
    by the granite case above."""
    make_tiny_checkpoint(tmp_path / "hf", "granite", spm_model)
    cfg_path = tmp_path / "hf" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    for key in ("embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling"):
        del cfg[key]
    cfg_path.write_text(json.dumps(cfg))
    meta = Model.load(convert(tmp_path / "hf", tmp_path / "model.gguf"), n_ctx=256).metadata
    assert [meta[f"granite.{k}"] for k in ("embedding_scale", "attention.scale", "residual_scale", "logit_scale")] \
        == [1.0] * 4


def test_llama3_rope_factors_match_transformers():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from edgeinfer.convert.rope import llama3_rope_factors, rope_parameters

    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64, "rope_theta": 500000.0}
    config = LlamaConfig(hidden_size=256, num_attention_heads=2, rope_parameters=rope, max_position_embeddings=512)
    inv_freq, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    head_dim = 128
    base = 1.0 / 500000.0 ** (np.arange(0, head_dim, 2) / head_dim)
    factors = llama3_rope_factors(rope_parameters(config.to_dict()), head_dim)
    assert len({round(float(f), 3) for f in factors}) > 2   # short, long and blended wavelengths
    np.testing.assert_allclose(factors, base / inv_freq.double().numpy(), rtol=1e-5)
