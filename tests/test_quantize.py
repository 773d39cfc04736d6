"""`edgeinfer quantize`: the per-tensor type plan of llama.cpp's presets, a tiny random F32 model
quantized to every preset (loads, logits within per-type bounds of the F32 model), metadata
carried over, requantization guarded, an interrupted run leaves no output file, and SmolLM2 F32
quantized end to end (byte-identical with llama.cpp's own files when its build is at hand)."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from edgeinfer import _core
from edgeinfer.errors import EdgeInferError
from edgeinfer.model import Model
from edgeinfer.quantize import PRESETS, QuantizeOptions, make_plan, parse_tensor_type, quantize_file
from edgeinfer.quantize.plan import ModelShape, TensorInfo, use_more_bits
from support.cli import child_env, run_cli
from support.output_paths import UNWRITABLE, assert_cli_refused, assert_refused_before_any_work, unwritable_output
from support.tiny_llama import KQUANTIZABLE


# Rows of 256 and 512 so that every k-quant fits (no fallbacks) in the tiny model.
def _llama_tensors(n_layer: int, n_embd: int, n_ff: int, tied: bool) -> list[TensorInfo]:
    out = [TensorInfo("token_embd.weight", [n_embd, 1000], T.F32), TensorInfo("output_norm.weight", [n_embd], T.F32)]
    if not tied:
        out.append(TensorInfo("output.weight", [n_embd, 1000], T.F32))
    for i in range(n_layer):
        for name, shape in (("attn_q", [n_embd, n_embd]), ("attn_k", [n_embd, n_embd // 4]),
                            ("attn_v", [n_embd, n_embd // 4]), ("attn_output", [n_embd, n_embd]),
                            ("ffn_gate", [n_embd, n_ff]), ("ffn_up", [n_embd, n_ff]), ("ffn_down", [n_ff, n_embd])):
            out.append(TensorInfo(f"blk.{i}.{name}.weight", shape, T.F32))
        out.append(TensorInfo(f"blk.{i}.attn_norm.weight", [n_embd], T.F32))
    return out


def _types(plans) -> dict[str, T]:
    return {p.name: p.dst_type for p in plans}


def test_q4_k_m_gives_more_bits_to_output_and_some_attn_v_and_ffn_down():
    shape = ModelShape("llama", n_layer=16, n_head=8, n_head_kv=2)
    types = _types(make_plan(_llama_tensors(16, 512, 1024, tied=False), shape, QuantizeOptions("Q4_K_M")))
    assert types["output.weight"] == T.Q6_K
    assert types["token_embd.weight"] == T.Q4_K
    assert types["blk.0.attn_norm.weight"] == T.F32
    more = [i for i in range(16) if use_more_bits(i, 16)]
    assert more == [0, 1, 4, 7, 10, 13, 14, 15]
    for i in range(16):
        expected = T.Q6_K if i in more else T.Q4_K
        assert types[f"blk.{i}.attn_v.weight"] == expected
        assert types[f"blk.{i}.ffn_down.weight"] == expected
        assert types[f"blk.{i}.attn_q.weight"] == T.Q4_K


def test_layer_counters_follow_layer_numbers_not_name_order():
    # "blk.10" sorts before "blk.2" as text; llama.cpp counts layers numerically.
    shape = ModelShape("llama", n_layer=12, n_head=8, n_head_kv=8)
    plans = make_plan(_llama_tensors(12, 256, 512, tied=False), shape, QuantizeOptions("Q3_K_M"))
    types = _types(plans)
    assert [types[f"blk.{i}.attn_v.weight"] for i in range(3)] == [T.Q5_K, T.Q5_K, T.Q4_K]
    assert [p.name for p in plans][:2] == ["output.weight", "output_norm.weight"]  # no layer: first


def test_tied_embeddings_and_fallbacks_for_rows_that_do_not_fit():
    shape = ModelShape("llama", n_layer=2, n_head=9, n_head_kv=3)
    plans = make_plan(_llama_tensors(2, 576, 1536, tied=True), shape, QuantizeOptions("Q4_K_M"))
    types = _types(plans)
    assert types["token_embd.weight"] == T.Q8_0          # the output's rule; 576 % 256 != 0
    assert types["blk.0.attn_q.weight"] == T.Q5_0        # Q4_K does not fit 576 -> Q5_0
    assert types["blk.0.ffn_down.weight"] == T.Q4_K      # rows of 1536 fit
    assert types["blk.1.ffn_down.weight"] == T.Q6_K      # the last eighth of the layers
    notices = [p.notice for p in plans if p.notice]
    assert any("blk.0.attn_q.weight" in n and "Q5_0" in n for n in notices)
    types_q4_0 = _types(make_plan(_llama_tensors(2, 576, 1536, tied=True), shape, QuantizeOptions("Q4_0")))
    assert types_q4_0["token_embd.weight"] == T.Q8_0     # Q6_K asked, falls back to Q8_0
    assert types_q4_0["blk.1.ffn_down.weight"] == T.Q4_0


# llama.cpp's i-quant presets on a 16-layer model with rows of 512 and 1024 (every type fits):
# (default type, output, token_embd, attn_q, attn_k, attn_output, the gate / up types of layers
# 0-1 and 14-15 then of 2-13, ffn_down of layers 0-1 then 2-15). attn_v comes separately.
IQ_PLANS = {
    "IQ2_XXS": (T.IQ2_XXS, T.Q5_K, T.Q2_K, T.IQ2_XXS, T.IQ2_XXS, T.IQ2_XXS, (T.IQ2_XXS,) * 2, (T.Q2_K, T.IQ2_XXS)),
    "IQ2_XS": (T.IQ2_XS, T.Q5_K, T.Q2_K, T.IQ2_XS, T.IQ2_XS, T.IQ2_XS, (T.IQ2_XS,) * 2, (T.Q2_K, T.IQ2_XS)),
    "IQ2_S": (T.IQ2_XS, T.Q5_K, T.IQ3_S, T.IQ2_XS, T.IQ2_XS, T.IQ3_S, (T.IQ2_XS,) * 2, (T.IQ3_S, T.IQ2_XS)),
    "IQ2_M": (T.IQ2_S, T.Q5_K, T.IQ3_S, T.IQ2_S, T.IQ2_S, T.IQ3_S, (T.IQ2_S,) * 2, (T.IQ3_S, T.IQ2_S)),
    "IQ1_S": (T.IQ1_S, T.Q5_K, T.Q2_K, T.IQ1_S, T.IQ1_S, T.IQ2_XXS, (T.IQ1_S,) * 2, (T.Q2_K, T.IQ1_S)),
    "IQ1_M": (T.IQ1_M, T.Q5_K, T.Q2_K, T.IQ1_M, T.IQ1_M, T.IQ2_XXS, (T.IQ1_M,) * 2, (T.Q2_K, T.IQ1_M)),
    "IQ3_XXS": (T.IQ3_XXS, T.Q5_K, T.IQ3_S, T.IQ2_S, T.IQ2_S, T.IQ3_S, (T.IQ3_XXS,) * 2, (T.IQ3_XXS, T.IQ3_XXS)),
    "IQ3_XS": (T.IQ3_S, T.Q6_K, T.IQ3_S, T.IQ3_XXS, T.IQ3_XXS, T.IQ3_S, (T.IQ3_S, T.IQ3_XXS), (T.IQ3_S, T.IQ3_S)),
    "IQ3_S": (T.IQ3_S, T.Q6_K, T.IQ3_S, T.IQ3_S, T.IQ3_S, T.IQ3_S, (T.IQ3_S,) * 2, (T.IQ3_S, T.IQ3_S)),
    "IQ3_M": (T.IQ3_S, T.Q6_K, T.IQ3_S, T.IQ3_S, T.IQ3_S, T.Q4_K, (T.IQ3_S,) * 2, (T.Q4_K, T.IQ3_S)),
}
# attn_v at GQA 4 and at GQA 1 (no GQA), with an importance matrix.
IQ_ATTN_V = {"IQ2_XXS": (T.Q4_K, T.Q2_K), "IQ2_XS": (T.Q4_K, T.Q2_K), "IQ2_S": (T.Q4_K, T.IQ3_S),
             "IQ2_M": (T.Q4_K, T.IQ3_S), "IQ1_S": (T.Q4_K, T.Q2_K), "IQ1_M": (T.Q4_K, T.Q2_K),
             "IQ3_XXS": (T.Q4_K, T.IQ3_XXS), "IQ3_XS": (T.Q4_K, T.IQ3_S), "IQ3_S": (T.Q4_K, T.IQ3_S),
             "IQ3_M": (T.Q4_K, T.Q4_K)}


@pytest.mark.parametrize("preset", IQ_PLANS)
def test_i_quant_presets_follow_llama_cpp(preset):
    default, output, embd, attn_q, attn_k, attn_output, gate_up, ffn_down = IQ_PLANS[preset]
    assert PRESETS[preset][1] == default
    for n_head_kv, attn_v in zip((2, 8), IQ_ATTN_V[preset]):
        shape = ModelShape("llama", n_layer=16, n_head=8, n_head_kv=n_head_kv)
        types = _types(make_plan(_llama_tensors(16, 512, 1024, tied=False), shape,
                                 QuantizeOptions(preset, has_imatrix=True)))
        assert (types["output.weight"], types["token_embd.weight"]) == (output, embd)
        for i in range(16):
            middle = 2 <= i < 14
            assert types[f"blk.{i}.attn_v.weight"] == attn_v, (i, n_head_kv)
            assert (types[f"blk.{i}.attn_q.weight"], types[f"blk.{i}.attn_k.weight"]) == (attn_q, attn_k)
            assert types[f"blk.{i}.attn_output.weight"] == attn_output
            assert types[f"blk.{i}.ffn_gate.weight"] == types[f"blk.{i}.ffn_up.weight"] == gate_up[middle], i
            assert types[f"blk.{i}.ffn_down.weight"] == ffn_down[i >= 2], i


def test_i_quant_rules_without_an_imatrix_tied_embeddings_experts_and_fallbacks():
    shape = ModelShape("llama", n_layer=16, n_head=8, n_head_kv=8)
    tensors = _llama_tensors(16, 512, 1024, tied=False)
    # IQ3_XXS without an importance matrix: attn_v IQ3_S, ffn_down Q4_K then Q3_K.
    types = _types(make_plan(tensors, shape, QuantizeOptions("IQ3_XXS")))
    assert types["blk.5.attn_v.weight"] == T.IQ3_S
    assert [types[f"blk.{i}.ffn_down.weight"] for i in (0, 1, 2, 15)] == [T.Q4_K, T.Q4_K, T.Q3_K, T.Q3_K]
    # Tied: token_embd takes the output's rule.
    tied = _types(make_plan(_llama_tensors(16, 512, 1024, tied=True), shape, QuantizeOptions("IQ3_XXS")))
    assert tied["token_embd.weight"] == T.Q5_K
    # Eight experts: attn_v Q8_0 (the k-quant branch), attn_k / attn_output per branch.
    moe = ModelShape("llama", n_layer=16, n_head=8, n_head_kv=8, n_expert=8)
    iq3m = _types(make_plan(tensors, moe, QuantizeOptions("IQ3_M", has_imatrix=True)))
    assert (iq3m["blk.3.attn_v.weight"], iq3m["blk.3.attn_output.weight"]) == (T.Q8_0, T.Q5_K)
    assert iq3m["blk.4.ffn_down.weight"] == T.Q4_K     # use_more_bits(4, 16)
    iq2 = _types(make_plan(tensors, moe, QuantizeOptions("IQ2_XS", has_imatrix=True)))
    assert (iq2["blk.3.attn_v.weight"], iq2["blk.3.attn_k.weight"], iq2["blk.3.attn_output.weight"]) == (
        T.Q4_K, T.Q4_K, T.Q5_K)
    # Rows that are not whole super-blocks: the i-quants fall back to IQ4_NL, then F16.
    odd = [TensorInfo("blk.0.attn_q.weight", [288, 64], T.F32), TensorInfo("blk.0.attn_k.weight", [48, 64], T.F32)]
    plans = make_plan(odd, ModelShape("llama", n_layer=1, n_head=1, n_head_kv=1), QuantizeOptions("IQ3_XS"))
    assert [(p.name, p.dst_type) for p in plans] == [("blk.0.attn_k.weight", T.F16),
                                                     ("blk.0.attn_q.weight", T.IQ4_NL)]
    assert all(p.notice for p in plans)


def test_overrides_pure_and_plain_presets():
    shape = ModelShape("llama", n_layer=4, n_head=8, n_head_kv=2)
    tensors = _llama_tensors(4, 512, 1024, tied=False)
    opts = QuantizeOptions("Q4_K_M", output_tensor_type=T.Q8_0, token_embedding_type=T.F16,
                           tensor_types=[parse_tensor_type(r"attn_(q|k)=q5_k")])
    types = _types(make_plan(tensors, shape, opts))
    assert types["output.weight"] == T.Q8_0 and types["token_embd.weight"] == T.F16
    assert types["blk.3.attn_q.weight"] == T.Q5_K and types["blk.3.attn_k.weight"] == T.Q5_K
    pure = _types(make_plan(tensors, shape, QuantizeOptions("Q4_K_M", pure=True)))
    assert {pure[n] for n in pure if "norm" not in n} == {T.Q4_K}
    f16 = _types(make_plan(tensors, shape, QuantizeOptions("F16")))
    assert f16["blk.0.attn_norm.weight"] == T.F32 and f16["output.weight"] == T.F16
    with pytest.raises(EdgeInferError, match="REGEX=TYPE"):
        parse_tensor_type("attn_q")


@pytest.fixture(scope="module")
def tiny_f32(tiny_llama_file) -> Path:
    return tiny_llama_file(KQUANTIZABLE)[0]


# Relative RMS difference of the logits from the F32 model's over 37 positions, measured:
# F16 0.0007, BF16 0.005, Q4_0 0.18, Q4_1 0.17, Q5_0 0.096, Q5_1 0.085, Q8_0 0.017, Q2_K 0.54,
# Q3_K_S 0.32, Q3_K_M 0.28, Q3_K_L 0.27, Q4_K_S/M 0.15, Q5_K_S/M 0.08, Q6_K 0.045, IQ4_NL 0.166,
# IQ4_XS 0.170, IQ3_S 0.35, IQ3_M 0.33, TQ1_0 = TQ2_0 0.935 (ternary weights of random Gaussian ones: little of them is
# left; the two hold the same values) (random weights: much larger than on a trained model).
# Bounds ~1.4x.
LOGIT_BOUND = {"F32": 1e-6, "F16": 0.002, "BF16": 0.008, "Q4_0": 0.26, "Q4_1": 0.25, "Q5_0": 0.14,
               "Q5_1": 0.12, "Q8_0": 0.025, "Q2_K": 0.75, "Q3_K_S": 0.45, "Q3_K_M": 0.4, "Q3_K_L": 0.38,
               "Q4_K_S": 0.21, "Q4_K_M": 0.21, "Q5_K_S": 0.115, "Q5_K_M": 0.115, "Q6_K": 0.065,
               "IQ4_NL": 0.235, "IQ4_XS": 0.24, "IQ3_S": 0.49, "IQ3_M": 0.46, "TQ1_0": 1.3, "TQ2_0": 1.3,
               "MXFP4_MOE": 0.025}   # a dense model: Q8_0 throughout
# Presets that need an importance matrix, tested with one in test_imatrix.py.
NEEDS_IMATRIX = {"Q2_K_S", "IQ3_XS", "IQ3_XXS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M"}


def test_tiny_model_quantized_to_every_preset_stays_close_to_f32(tiny_f32, tmp_path):
    assert set(LOGIT_BOUND) | NEEDS_IMATRIX == set(PRESETS)
    ids = list(range(3, 40))
    ref = Model.load(tiny_f32, n_ctx=64, n_threads=2).eval_logits(ids)
    for preset, bound in LOGIT_BOUND.items():
        out = tmp_path / f"{preset}.gguf"
        result = quantize_file(tiny_f32, out, QuantizeOptions(preset), n_threads=2)
        assert result.notices == []
        f = _core.GgufFile(str(out))
        assert f.get("general.file_type") == int(PRESETS[preset][0])
        assert f.get("general.quantization_version") == 2
        assert f.get("general.name") == "tiny-random-llama"
        assert f.get("tokenizer.ggml.tokens") == _core.GgufFile(str(tiny_f32)).get("tokenizer.ggml.tokens")
        logits = Model.load(out, n_ctx=64, n_threads=2).eval_logits(ids)
        rel = float(np.sqrt(np.mean((logits - ref) ** 2) / np.mean(ref ** 2)))
        assert rel <= bound, (preset, rel)
        out.unlink()


def test_quantized_input_needs_allow_requantize(tiny_f32, tmp_path):
    q8 = tmp_path / "q8.gguf"
    quantize_file(tiny_f32, q8, QuantizeOptions("Q8_0"))
    with pytest.raises(EdgeInferError, match="--allow-requantize"):
        quantize_file(q8, tmp_path / "q4.gguf", QuantizeOptions("Q4_K_M"))
    assert not (tmp_path / "q4.gguf").exists()
    with pytest.warns(UserWarning, match="requantizing"):
        quantize_file(q8, tmp_path / "q4.gguf", QuantizeOptions("Q4_K_M", allow_requantize=True))
    assert Model.load(tmp_path / "q4.gguf", n_ctx=32).eval_logits([3, 4, 5]).shape[0] == 3


def test_an_exception_mid_way_leaves_no_file(tiny_f32, tmp_path):
    out = tmp_path / "out.gguf"
    seen = []

    def boom(plan, bytes_in, bytes_out):
        seen.append(plan.name)
        if len(seen) == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        quantize_file(tiny_f32, out, QuantizeOptions("Q4_K_M"), on_tensor=boom)
    assert list(tmp_path.iterdir()) == []


def quantize_cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli("quantize", *args, timeout=120)


def test_killed_cli_leaves_no_file_under_the_output_name(tiny_f32, tmp_path):
    # A child that quantizes slowly (a sleep after each tensor) is sent SIGTERM mid-way.
    out = tmp_path / "out.gguf"
    child = (
        "import sys, time\n"
        "import edgeinfer.quantize.run as run\n"
        "orig = run.quantize_file\n"
        "def slow(*a, on_tensor=None, **k):\n"
        "    def hook(*x):\n"
        "        on_tensor(*x)\n"
        "        print('tensor', flush=True)\n"
        "        time.sleep(0.2)\n"
        "    return orig(*a, on_tensor=hook, **k)\n"
        "import edgeinfer.cli.quantize as cq\n"
        "cq.quantize_file = slow\n"
        "from edgeinfer.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", child, "quantize", str(tiny_f32), str(out), "Q4_K_M"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
    for _ in range(3):
        assert proc.stdout.readline().startswith("tensor")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert list(tmp_path.iterdir()) == []


def test_cli_quantize_writes_the_file_and_a_summary(tiny_f32, tmp_path):
    out = tmp_path / "q6.gguf"
    proc = quantize_cli(str(tiny_f32), str(out), "q6_k", "-t", "2", "--tensor-type", "ffn_down=q8_0")
    assert proc.returncode == 0, proc.stderr
    assert "bpw" in proc.stderr and "wrote" in proc.stderr
    types = {t["name"]: t["type_name"] for t in _core.GgufFile(str(out)).tensors()}
    assert types["blk.1.ffn_down.weight"] == "q8_0" and types["blk.1.ffn_up.weight"] == "q6_K"
    bad = quantize_cli(str(tiny_f32), str(out), "Q7_X")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_f16_and_bf16_inputs_convert_exactly_before_quantizing(tiny_f32, tmp_path):
    src = _core.GgufFile(str(tiny_f32))
    name = "blk.0.ffn_down.weight"
    x = np.frombuffer(src.tensor_data(name), dtype=np.float32).reshape(256, 512)
    def via_bf16(a: np.ndarray) -> np.ndarray:
        return _core.dequantize(int(T.BF16), _core.quantize_rows(int(T.BF16), a).reshape(-1), a.size).reshape(a.shape)

    for plain, as_float in (("F16", lambda a: a.astype(np.float16).astype(np.float32)), ("BF16", via_bf16)):
        mid, out = tmp_path / f"{plain}.gguf", tmp_path / f"{plain}-q4k.gguf"
        quantize_file(tiny_f32, mid, QuantizeOptions(plain))
        quantize_file(mid, out, QuantizeOptions("Q4_K_M"))   # F16/BF16 are not "quantized": no flag needed
        got = _core.GgufFile(str(out)).tensor_data(name)
        expected = _core.quantize_rows(int(_core.GgufFile(str(out)).tensor(name)["type"]), as_float(x))
        assert np.array_equal(np.asarray(got), expected.reshape(-1)), plain


def test_an_existing_output_is_refused_without_force_and_replaced_with_it(tiny_f32, tmp_path):
    out = tmp_path / "q8.gguf"
    out.write_bytes(b"keep me")
    assert_cli_refused(quantize_cli(str(tiny_f32), str(out), "Q8_0"), f"{out} already exists", "--force")
    assert out.read_bytes() == b"keep me"
    proc = quantize_cli(str(tiny_f32), str(out), "Q8_0", "--force", "-t", "1000")
    assert proc.returncode == 0, proc.stderr
    assert "1000 threads requested" in proc.stderr      # -t above the CPUs: capped, with a warning
    assert _core.GgufFile(str(out)).get("general.file_type") == int(PRESETS["Q8_0"][0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q8.gguf"]


def test_the_api_names_its_own_arguments_and_the_cli_its_flags(tiny_f32, tmp_path):
    out = tmp_path / "q8.gguf"
    out.write_bytes(b"keep me")
    with pytest.raises(EdgeInferError, match=r"already exists; pass force=True to overwrite it"):
        quantize_file(tiny_f32, out, QuantizeOptions("Q8_0"))
    with pytest.raises(EdgeInferError, match=r"^tensor_types rule 'ffn_down' is not REGEX=TYPE$"):
        parse_tensor_type("ffn_down")
    assert_cli_refused(quantize_cli(str(tiny_f32), str(tmp_path / "b.gguf"), "Q8_0", "--tensor-type", "(=q8_0"),
                       "--tensor-type rule '(=q8_0': bad regular expression")


def test_the_input_is_never_the_output_even_with_force(tiny_f32, tmp_path):
    before = tiny_f32.read_bytes()
    assert_cli_refused(quantize_cli(str(tiny_f32), str(tiny_f32), "Q8_0", "--force"), f"{tiny_f32} is the input")
    link = tmp_path / "link.gguf"
    link.symlink_to(tiny_f32)
    with pytest.raises(EdgeInferError, match="is the input"):
        quantize_file(tiny_f32, link, QuantizeOptions("Q8_0"), force=True)
    assert tiny_f32.read_bytes() == before


@pytest.mark.parametrize("relative, message", UNWRITABLE)
def test_an_unwritable_output_is_refused_before_any_work(tiny_f32, tmp_path, relative, message):
    out = unwritable_output(tmp_path, relative)
    assert_refused_before_any_work(tmp_path, out, message, lambda never: quantize_file(
        tiny_f32, out, QuantizeOptions("Q4_K_M"), on_plan=never, on_tensor=never, force=True))
    assert_cli_refused(quantize_cli(str(tiny_f32), str(out), "Q4_K_M"), str(out), message)


def test_a_write_error_names_the_output_not_the_temporary_file(tiny_f32, tmp_path):
    out = tmp_path / "out.gguf"

    def make_it_a_folder(plan, *_):   # OUT turns into a folder while the file is written
        out.mkdir(exist_ok=True)

    with pytest.raises(EdgeInferError) as exc:
        quantize_file(tiny_f32, out, QuantizeOptions("Q8_0"), on_tensor=make_it_a_folder)
    assert str(exc.value).startswith(f"cannot write {out}: ") and ".partial" not in str(exc.value)
    assert [p.name for p in tmp_path.iterdir()] == ["out.gguf"] and out.is_dir()
