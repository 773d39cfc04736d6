"""YaRN RoPE scaling end to end: tiny random Llama, Qwen 2 and Qwen 3 checkpoints whose config.json
says rope_type "yarn" (factor 4 over an original 32 positions, max_position_embeddings 128),
converted by `edgeinfer convert` and, where a llama.cpp source tree is here, by llama.cpp's
convert_hf_to_gguf.py. edgeinfer's logits follow transformers' over prompts past the original
context (prefill and decode), the two converters write the same rope keys and so the same logits,
and the same tensors under plain or linear RoPE miss transformers' logits by far: the check can
fail. Also: scalings the core lacks are one error at load and in `info`; a context shift moves
YaRN keys by the angle only. The rotation itself is checked in tests/test_rope_yarn.py."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")

from gguf import GGUFValueType as VT  # noqa: E402

from edgeinfer import Model, _testing  # noqa: E402
from edgeinfer.cli.info import summarize  # noqa: E402
from edgeinfer.convert import convert_checkpoint  # noqa: E402
from edgeinfer.convert.architectures import architecture_for  # noqa: E402
from edgeinfer.errors import ModelFormatError  # noqa: E402
from support.gguf_mutate import load_base, set_kv  # noqa: E402
from support.hf_compare import REL_TOL, check_against_hf  # noqa: E402
from support.hf_tiny import hf_logits, make_tiny_checkpoint, train_sentencepiece  # noqa: E402
from support.llamacpp_venv import llamacpp_converter, start_llamacpp_converter  # noqa: E402

N_CTX = 128
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "rope_theta": 10000.0}
VARIANTS = {
    "llama": ("llama", YARN),
    "qwen2": ("qwen2", YARN),
    "qwen3": ("qwen3", YARN),
    # transformers' optional settings (llama.cpp's converter writes them; its loader reads them for
    # a few other architectures only, the core for every one)
    "qwen3-betas": ("qwen3", {**YARN, "beta_fast": 8.0, "beta_slow": 2.0, "attention_factor": 1.25}),
}
# 40 to 100 tokens: well past the original 32 positions, inside the 128 of the context.
LONG_PROMPT = "Hello, world!\n  def f(x): return x ** 2  # word17 token3 piece1 " * 2
CONVERTER = llamacpp_converter()


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    return train_sentencepiece(tmp_path_factory.mktemp("spm"))


@pytest.fixture(scope="module", params=list(VARIANTS))
def converted(request, spm_model, tmp_path_factory):
    """(variant, GGUF arch, the transformers model, edgeinfer's F32 file, llama.cpp's or None)."""
    family, rope = VARIANTS[request.param]
    tmp = tmp_path_factory.mktemp(request.param)
    model = make_tiny_checkpoint(tmp / "hf", family, spm_model, max_position_embeddings=N_CTX,
                                 rope_parameters=dict(rope))
    ours, theirs = tmp / "edgeinfer.gguf", tmp / "llamacpp.gguf"
    run = start_llamacpp_converter(CONVERTER, tmp / "hf", theirs) if CONVERTER else None
    convert_checkpoint(tmp / "hf", ours, "f32")
    if run is not None:
        log, _ = run.communicate(timeout=300)
        assert run.returncode == 0, f"convert_hf_to_gguf.py failed:\n{log[-3000:]}"
    arch = "llama" if family == "llama" else family
    return request.param, arch, model, ours, theirs if run is not None else None


def long_ids(model: Model) -> list[int]:
    ids = model.tokenize(LONG_PROMPT)
    assert 40 < len(ids) < N_CTX
    return ids


def test_logits_match_transformers_past_the_original_context(converted):
    _, arch, model, ours, _ = converted
    hp = Model.load(ours, n_ctx=N_CTX).metadata
    assert hp[f"{arch}.rope.scaling.type"] == "yarn" and hp[f"{arch}.rope.scaling.original_context_length"] == 32
    check_against_hf(model, ours, n_ctx=N_CTX, prompts=[LONG_PROMPT])


def test_the_same_tensors_under_plain_or_linear_rope_miss_transformers_by_far(converted, tmp_path):
    """The file with its scaling type rewritten: the YaRN math is what makes the check pass."""
    name, arch, model, ours, _ = converted
    if name != "qwen2" and name != "llama":
        pytest.skip("one neox and one normal-mode family suffice")
    base = load_base("yarn", ours)
    for scaling in ("none", "linear"):
        path = set_kv(base, f"{arch}.rope.scaling.type", VT.STRING, scaling).write(tmp_path / f"{scaling}.gguf")
        em = Model.load(path, n_ctx=N_CTX, n_threads=2)
        ids = long_ids(em)
        ref = hf_logits(model, ids)
        diff = np.abs(em.eval_logits(ids) - ref).max()
        assert diff > 5 * REL_TOL * np.abs(ref).max(), (scaling, diff)


def test_llamacpp_converter_writes_the_same_rope_keys_and_logits(converted):
    _, arch, model, ours, theirs = converted
    if theirs is None:
        pytest.skip("no llama.cpp source tree (scripts/llamacpp_bin.py unpacks one)")
    a, b = (Model.load(p, n_ctx=N_CTX, n_threads=2) for p in (theirs, ours))

    def rope_keys(m: Model) -> dict:
        return {k: v for k, v in m.metadata.items() if k.startswith((f"{arch}.rope.scaling.", f"{arch}.rope.freq"))}

    assert rope_keys(a) == rope_keys(b)
    ids = long_ids(a)
    np.testing.assert_array_equal(a.eval_logits(ids), b.eval_logits(ids))
    check_against_hf(model, theirs, n_ctx=N_CTX, prompts=[LONG_PROMPT], decode=False)


def test_the_trained_context_is_the_original_times_the_factor(converted, tmp_path):
    """Qwen 2.5 ships context_length 32768 with YaRN over an original 32768: the context the
    scaling is for is 4 times that, and a context that long is not clamped."""
    _, arch, _, ours, _ = converted
    path = set_kv(load_base("yarn", ours), f"{arch}.context_length", VT.UINT32, 32).write(tmp_path / "short.gguf")
    from edgeinfer import _core

    hp = _core.GgufFile(str(path)).hparams()
    assert (hp["rope_scaling"], hp["n_ctx_train"], hp["rope_n_ctx_orig"]) == ("yarn", 128, 32)
    assert Model.load(path, n_ctx=N_CTX).n_ctx_train == N_CTX


def test_a_scaling_the_core_lacks_is_one_error_at_load_and_in_info(converted, tmp_path):
    name, arch, _, ours, _ = converted
    if name != "qwen2":
        pytest.skip("once")
    from edgeinfer import _core

    path = set_kv(load_base("yarn", ours), f"{arch}.rope.scaling.type", VT.STRING, "dynamic").write(tmp_path / "d.gguf")
    with pytest.raises(ModelFormatError, match="rope scaling 'dynamic' is not supported"):
        Model.load(path, n_ctx=N_CTX)
    info = summarize(_core.GgufFile(str(path)))
    assert info["supported"] is False and "rope scaling 'dynamic'" in info["settings_error"]


@pytest.mark.parametrize("rope, match", [
    ({"rope_type": "dynamic", "factor": 2.0}, "rope scaling 'dynamic'"),
    ({"rope_type": "yarn", "original_max_position_embeddings": 32}, "without a factor"),
    ({"rope_type": "yarn", "factor": 4.0}, "original_max_position_embeddings"),
    ({**YARN, "truncate": False}, "truncate"),
    ({**YARN, "mscale": 0.707, "mscale_all_dim": 0.707}, "mscale"),
])
@pytest.mark.parametrize("hf_arch", ["LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"])
def test_converter_refuses_what_it_cannot_write_faithfully(rope, match, hf_arch):
    """"dynamic" (NTK): llama.cpp's converter writes no scaling for it (a plain-RoPE file) and ggml
    has none; the YaRN settings transformers honours and ggml cannot express are refused too."""
    cfg = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "rope_parameters": rope}
    with pytest.raises(ModelFormatError, match=match):
        architecture_for(hf_arch, cfg)


def shift_errors(path, arch: str, n_ctx: int, ids: list[int], **rope) -> dict[bool, float]:
    """Decode `ids`, shift 10 positions out after the first 4, and compare the moved keys with the
    cached ones rotated by -10 in numpy (neox pairs): the largest relative error with the angle
    alone (False) and with the magnitude applied again (True)."""
    m = Model.load(path, n_ctx=n_ctx, n_threads=2)
    hp = m.metadata
    n_head_kv, n_layer = hp[f"{arch}.attention.head_count_kv"], hp[f"{arch}.block_count"]
    n_keep, d, n = 4, 10, len(ids)
    ctx = m.context
    ctx.decode(np.array(ids, dtype=np.int32))
    before = ctx.kv_snapshot(n).view(np.float16).reshape(n_layer, 2, n, n_head_kv, -1).astype(np.float64)
    ctx.shift(n_keep, d)
    after = ctx.kv_snapshot(n - d).view(np.float16).reshape(n_layer, 2, n - d, n_head_kv, -1).astype(np.float64)
    n_rot = before.shape[-1]
    k = before[:, 0, n_keep + d:]
    x0, x1 = k[..., :n_rot // 2], k[..., n_rot // 2:]
    errors = {}
    for scaled in (False, True):
        cs = _testing.rope_cos_sin(n_rot, [-d], scale_magnitude=scaled, **rope)[0].astype(np.float64)
        c, s = cs[0::2], cs[1::2]
        want = np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)
        errors[scaled] = np.abs(after[:, 0, n_keep:] - want).max() / np.abs(want).max()
    return errors


def test_context_shift_rotates_yarn_keys_by_the_angle_only(converted):
    """A key cached at p holds cos/sin scaled by YaRN's magnitude; moving it to p - d rotates it
    by -d's angles alone (a second scaling would put every moved key 14% off)."""
    name, arch, _, ours, _ = converted
    if name != "qwen2":
        pytest.skip("once")
    ids = long_ids(Model.load(ours, n_ctx=N_CTX))
    errors = shift_errors(ours, arch, N_CTX, ids, freq_base=10000.0, freq_scale=0.25, ext_factor=1.0, n_ctx_orig=32)
    assert errors[False] < 2e-3 and errors[True] > 5e-2, errors


def test_context_shift_rotates_longrope_keys_by_the_angle_only(spm_model, tmp_path):
    """The same for Phi-3's LongRoPE (the long factors, cos/sin scaled by its attention factor),
    which the core refused to shift before rotations by the angle alone."""
    long_factor = [1.0 + 0.5 * i for i in range(8)]
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "long_factor": long_factor,
            "short_factor": [1.0 + 0.1 * i for i in range(8)]}
    make_tiny_checkpoint(tmp_path / "hf", "phi3", spm_model, max_position_embeddings=256,
                         original_max_position_embeddings=16, rope_parameters=rope)
    convert_checkpoint(tmp_path / "hf", tmp_path / "phi3.gguf", "f32")
    m = Model.load(tmp_path / "phi3.gguf", n_ctx=N_CTX)
    attn = m.metadata["phi3.rope.scaling.attn_factor"]
    errors = shift_errors(tmp_path / "phi3.gguf", "phi3", N_CTX, long_ids(m), freq_base=10000.0,
                          freq_factors=np.array(long_factor, np.float32), attn_factor=attn)
    assert attn > 1.1 and errors[False] < 2e-3 and errors[True] > 5e-2, errors
