"""`edgeinfer imatrix` and the importance-matrix files (edgeinfer.imatrix, quantize/imatrix_file.py):
what is collected (against the numpy reference's matmul inputs, and against llama-imatrix where a
llama.cpp build exists), both file formats both ways, and bad files refused with one clear error."""
from __future__ import annotations

import struct
import subprocess

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import LlamaFileType as FT

from edgeinfer import _core
from edgeinfer.errors import EdgeInferError
from edgeinfer.imatrix import collect
from edgeinfer.model import Model
from edgeinfer.quantize import PRESETS, QuantizeOptions, make_plan, quantize_file
from edgeinfer.quantize.imatrix_file import ImatrixEntry, ImportanceMatrix, load, save
from edgeinfer.quantize.plan import ModelShape, TensorInfo, requires_imatrix
from support.cli import run_cli
from support.llamacpp_venv import llamacpp_tool
from support.numpy_reference import LlamaReference
from support.tiny_llama import KQUANTIZABLE, TinyConfig

TEXT = "the quick brown fox jumps over the lazy dog; " * 40


def test_collects_the_sums_of_every_matmul_input(tiny_llama_file):
    cfg = TinyConfig()
    path, weights = tiny_llama_file(cfg)
    model = Model.load(path, n_ctx=64, n_threads=2)
    result = collect(model, TEXT, n_ctx=32, n_chunks=3, include_output=True)
    chunks = [np.asarray(model.tokenize(TEXT))[i * 32:(i + 1) * 32].copy() for i in range(3)]
    for c in chunks:
        if model.vocab.add_bos:
            c[0] = model.vocab.bos
    want: dict[str, list[np.ndarray]] = {}
    for c in chunks:
        LlamaReference(cfg, weights).forward(c.tolist(), on_matmul=lambda name, x: want.setdefault(name, []).append(x))
    im = result.imatrix
    assert sorted(im.entries) == sorted(want)   # every matmul weight, the output head too
    for name, xs in want.items():
        x = np.concatenate(xs)
        e = im.entries[name]
        assert e.counts.tolist() == [len(x)] == [96], name
        np.testing.assert_allclose(e.sum2[0], (x * x).sum(0), rtol=2e-3, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(e.sum[0], x.sum(0), rtol=2e-3, atol=2e-3 * np.abs(x).sum(0).max(), err_msg=name)
    assert im.chunk_count == 3 and im.chunk_size == 32
    # Without --process-output the output head is left out, as llama-imatrix leaves it out.
    plain = collect(model, TEXT, n_ctx=32, n_chunks=1).imatrix
    assert "output.weight" not in plain.entries and len(plain.entries) == len(want) - 1


def test_collection_stops_with_the_run(tiny_llama):
    collect(tiny_llama, TEXT, n_ctx=32, n_chunks=1)
    stats = tiny_llama.context.activation_stats()
    rows = {name: r for name, _, _, r in stats}
    tiny_llama.eval_logits([1, 5, 6, 7])          # a later decode adds nothing
    assert {name: r for name, _, _, r in tiny_llama.context.activation_stats()} == rows


def _sample_matrix() -> ImportanceMatrix:
    rng = np.random.default_rng(0)
    entries = {
        "blk.0.attn_q.weight": ImatrixEntry(rng.random((1, 64), dtype=np.float32) * 50, np.array([96]),
                                            rng.standard_normal((1, 64)).astype(np.float32)),
        "blk.0.ffn_down.weight": ImatrixEntry(rng.random((1, 96), dtype=np.float32), np.array([96]),
                                              rng.standard_normal((1, 96)).astype(np.float32)),
    }
    return ImportanceMatrix(entries, ["calibration.txt"], chunk_count=3, chunk_size=32)


def test_files_round_trip_in_both_formats(tmp_path):
    im = _sample_matrix()
    save(im, tmp_path / "m.gguf")
    back = load(tmp_path / "m.gguf")
    assert back.datasets == ["calibration.txt"] and (back.chunk_count, back.chunk_size) == (3, 32)
    for name, e in im.entries.items():
        assert np.array_equal(back.entries[name].sum2, e.sum2) and np.array_equal(back.entries[name].sum, e.sum)
        assert back.entries[name].counts.tolist() == [96]
    save(im, tmp_path / "m.dat", "dat")
    dat = load(tmp_path / "m.dat")
    assert dat.datasets == ["calibration.txt"] and dat.chunk_count == 3
    for name in im.entries:
        # .dat keeps the mean square times the chunk count: the weights agree to float rounding.
        np.testing.assert_allclose(dat.weights(name), im.weights(name), rtol=1e-6)
        np.testing.assert_array_equal(im.weights(name), im.entries[name].sum2[0] / np.float32(96))


def test_a_matrix_that_saw_no_rows_weighs_every_column_one():
    im = ImportanceMatrix({"w": ImatrixEntry(np.zeros((1, 4), np.float32), np.array([0]))})
    assert im.weights("w").tolist() == [1, 1, 1, 1] and im.weights("missing") is None


@pytest.mark.parametrize("damage", ["empty", "truncated_dat", "random", "model_file", "nan", "counts_missing"])
def test_bad_files_are_one_clear_error(tmp_path, damage, tiny_llama_path):
    im = _sample_matrix()
    path = tmp_path / "bad.gguf"
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "truncated_dat":
        save(im, tmp_path / "m.dat", "dat")
        path.write_bytes((tmp_path / "m.dat").read_bytes()[:100])
    elif damage == "random":
        path.write_bytes(struct.pack("<i", 3) + np.random.default_rng(1).bytes(200))
    elif damage == "model_file":
        path = tiny_llama_path
    elif damage == "nan":
        im.entries["blk.0.attn_q.weight"].sum2[0, 5] = np.nan
        save(im, path)
    elif damage == "counts_missing":
        save(im, tmp_path / "m.gguf")
        raw = bytearray((tmp_path / "m.gguf").read_bytes())
        i = raw.find(b"blk.0.attn_q.weight.counts")
        raw[i:i + 4] = b"BLK."          # the counts now belong to no entry
        path.write_bytes(bytes(raw))
    with pytest.raises(EdgeInferError) as err:
        load(path)
    assert str(path) in str(err.value) or damage == "model_file"


def test_the_command_writes_a_file_quantize_reads(tmp_path, tiny_llama_path):
    text = tmp_path / "calib.txt"
    text.write_text(TEXT)
    out = tmp_path / "m.gguf"
    r = run_cli("imatrix", str(tiny_llama_path), "-f", str(text), "-c", "32", "--chunks", "2", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "saved the importance matrix of 14 weights (2 chunks of 32 tokens" in r.stdout
    im = load(out)
    assert im.datasets == [str(text)] and im.chunk_count == 2
    again = run_cli("imatrix", str(tiny_llama_path), "-f", str(text), "-c", "32", "-o", str(out))
    assert again.returncode == 1 and "--force" in again.stderr and "Traceback" not in again.stderr


@pytest.fixture(scope="module")
def llama_imatrix():
    tool = llamacpp_tool("llama-imatrix")
    if tool is None:
        pytest.skip("no llama-imatrix (build llama.cpp with scripts/llamacpp_bin.py)")
    return tool


def test_smollm2_matches_llama_imatrix(llama_imatrix, smollm2_f32_path, fixtures_dir, tmp_path):
    """llama-imatrix on the same file and chunks (one chunk per batch: several sequences in one
    batch change the order its rows are summed in). The first layer's Q/K/V input is computed the
    same way by both, so its sums are the same bits; later inputs pass through llama.cpp's newer
    attention, whose float order differs from the one the exact mode reproduces, so they agree
    to rounding."""
    eval_text_path = fixtures_dir / "eval.txt"
    ref = tmp_path / "llama.gguf"
    subprocess.run([str(llama_imatrix), "-m", str(smollm2_f32_path), "-f", str(eval_text_path), "-c", "128",
                    "-b", "128", "--chunks", "2", "-t", "2", "-o", str(ref)], check=True, capture_output=True)
    model = Model.load(smollm2_f32_path, n_ctx=128, n_threads=2, exact=True)
    ours = collect(model, eval_text_path.read_text(), n_ctx=128, n_chunks=2).imatrix
    theirs = load(ref)
    assert sorted(ours.entries) == sorted(theirs.entries) and len(ours.entries) == 210
    for name, e in theirs.entries.items():
        mine = ours.entries[name]
        assert mine.counts.tolist() == e.counts.tolist() == [256]
        if name.startswith("blk.0.attn_") and name[11] in "qkv":
            assert np.array_equal(mine.sum2, e.sum2) and np.array_equal(mine.sum, e.sum), name
        np.testing.assert_allclose(mine.sum2, e.sum2, rtol=2e-2, err_msg=name)
    # Files written here load in llama.cpp's quantizer, in both formats.
    quantize = llamacpp_tool("llama-quantize")
    for fmt in ("gguf", "dat"):
        save(ours, tmp_path / f"ours.{fmt}", fmt)
        r = subprocess.run([str(quantize), "--imatrix", str(tmp_path / f"ours.{fmt}"), str(smollm2_f32_path),
                            str(tmp_path / "q.gguf"), "Q8_0", "2"], capture_output=True, text=True)
        assert r.returncode == 0 and "loaded 210 importance matrix entries" in r.stdout + r.stderr


# ---- quantize --imatrix ------------------------------------------------------------------------

def _tensors(n_layer: int, n_embd: int = 256, n_ff: int = 512) -> list[TensorInfo]:
    out = [TensorInfo("token_embd.weight", [n_embd, 1000], T.F32), TensorInfo("output.weight", [n_embd, 1000], T.F32)]
    for i in range(n_layer):
        for name, shape in (("attn_q", [n_embd, n_embd]), ("attn_v", [n_embd, n_embd // 4]),
                            ("ffn_down", [n_ff, n_embd])):
            out.append(TensorInfo(f"blk.{i}.{name}.weight", shape, T.F32))
    return out


def _plan(preset: str, has_imatrix: bool, n_gqa: int = 4) -> dict[str, T]:
    shape = ModelShape("llama", n_layer=16, n_head=8, n_head_kv=8 // n_gqa)
    plans = make_plan(_tensors(16), shape, QuantizeOptions(preset, has_imatrix=has_imatrix))
    return {p.name: p.dst_type for p in plans}


def test_presets_follow_llama_cpp_where_an_imatrix_changes_the_rules():
    # Q4_0 / Q5_0: the first eighth of ffn_down goes to Q4_1 / Q5_1, only with an importance matrix.
    for preset, guard in (("Q4_0", T.Q4_1), ("Q5_0", T.Q5_1)):
        without, with_ = _plan(preset, False), _plan(preset, True)
        assert [with_[f"blk.{i}.ffn_down.weight"] for i in (0, 1, 2)] == [guard, guard, T[preset]]
        assert without["blk.0.ffn_down.weight"] == T[preset]
    # IQ4_XS / IQ4_NL: Q5_K for the first eighth of ffn_down only without one.
    assert _plan("IQ4_XS", False)["blk.1.ffn_down.weight"] == T.Q5_K
    assert _plan("IQ4_XS", True)["blk.1.ffn_down.weight"] == T.IQ4_XS
    # Q2_K_S: Q2_K, attn_v Q4_K at GQA >= 4, the first eighth of ffn_down Q4_K.
    q2ks = _plan("Q2_K_S", True)
    assert q2ks["blk.5.attn_q.weight"] == T.Q2_K and q2ks["blk.5.attn_v.weight"] == T.Q4_K
    assert _plan("Q2_K_S", True, n_gqa=1)["blk.5.attn_v.weight"] == T.Q2_K
    assert [q2ks[f"blk.{i}.ffn_down.weight"] for i in (1, 2)] == [T.Q4_K, T.Q2_K]
    assert q2ks["output.weight"] == T.Q6_K and q2ks["token_embd.weight"] == T.Q2_K


def test_which_tensors_need_an_importance_matrix():
    assert requires_imatrix("blk.0.attn_q.weight", T.Q2_K, FT.MOSTLY_Q2_K_S)
    assert not requires_imatrix("blk.0.attn_q.weight", T.Q2_K, FT.MOSTLY_Q2_K)
    assert not requires_imatrix("token_embd.weight", T.Q2_K, FT.MOSTLY_Q2_K_S)
    assert not requires_imatrix("output.weight", T.IQ2_XXS, FT.MOSTLY_IQ2_XXS)
    assert requires_imatrix("blk.3.ffn_down.weight", T.IQ1_S, FT.MOSTLY_IQ1_S)
    assert not requires_imatrix("blk.3.ffn_down.weight", T.IQ4_XS, FT.MOSTLY_IQ4_XS)
    assert requires_imatrix("blk.3.attn_q.weight", T.IQ3_XXS, FT.MOSTLY_IQ3_XS)
    assert not requires_imatrix("blk.3.attn_q.weight", T.IQ3_S, FT.MOSTLY_IQ3_M)
    assert not requires_imatrix("token_embd.weight", T.IQ3_S, FT.MOSTLY_IQ3_XXS)


@pytest.mark.parametrize("n_gqa", [1, 4])
def test_which_i_quant_presets_need_an_importance_matrix(n_gqa):
    # As llama-quantize: every preset putting IQ1_*, IQ2_* or IQ3_XXS on some tensor.
    shape = ModelShape("llama", n_layer=16, n_head=8, n_head_kv=8 // n_gqa)
    needing = set()
    for preset in ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M", "IQ1_S", "IQ1_M"):
        ftype = PRESETS[preset][0]
        plans = make_plan(_tensors(16), shape, QuantizeOptions(preset, has_imatrix=True))
        if any(requires_imatrix(p.name, p.dst_type, ftype) for p in plans):
            needing.add(preset)
    assert needing == {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ1_S", "IQ1_M"}


@pytest.fixture(scope="module")
def kquant_tiny(tiny_llama_file):
    return tiny_llama_file(KQUANTIZABLE)[0]


def test_q2_k_s_without_an_importance_matrix_is_refused_before_any_work(kquant_tiny, tmp_path):
    out = tmp_path / "q.gguf"
    with pytest.raises(EdgeInferError, match=r"Q2_K_S needs an importance matrix \(edgeinfer imatrix"):
        quantize_file(kquant_tiny, out, QuantizeOptions("Q2_K_S"))
    assert not out.exists()
    r = run_cli("quantize", str(kquant_tiny), str(out), "Q2_K_S")
    assert r.returncode == 1 and "needs an importance matrix" in r.stderr and "Traceback" not in r.stderr


def test_an_importance_matrix_of_another_model_is_refused(kquant_tiny, tiny_llama_path, tmp_path):
    other = collect(Model.load(tiny_llama_path, n_ctx=64, n_threads=2), TEXT, n_ctx=32, n_chunks=1).imatrix
    out = tmp_path / "q.gguf"
    with pytest.raises(EdgeInferError, match="made for another model"):
        quantize_file(kquant_tiny, out, QuantizeOptions("Q4_K_M", has_imatrix=True), imatrix=other)
    assert not out.exists()


def test_q2_k_s_with_an_importance_matrix_quantizes_and_runs(kquant_tiny, tmp_path):
    model = Model.load(kquant_tiny, n_ctx=64, n_threads=2)
    im = collect(model, TEXT, n_ctx=32, n_chunks=2).imatrix
    ids = list(range(3, 40))
    ref = model.eval_logits(ids)
    out = tmp_path / "q2ks.gguf"
    quantize_file(kquant_tiny, out, QuantizeOptions("Q2_K_S", has_imatrix=True), n_threads=2, imatrix=im,
                  imatrix_path="calib.gguf")
    f = _core.GgufFile(str(out))
    assert f.get("quantize.imatrix.file") == "calib.gguf" and f.get("quantize.imatrix.entries_count") == 14
    assert f.get("quantize.imatrix.chunks_count") == 2
    logits = Model.load(out, n_ctx=64, n_threads=2).eval_logits(ids)
    rel = float(np.sqrt(np.mean((logits - ref) ** 2) / np.mean(ref ** 2)))
    assert rel <= 0.75, rel    # test_quantize.py's bound for Q2_K on this model
    # The weights reach the quantizers: the same preset's bytes differ with and without them.
    plain, weighted = tmp_path / "plain.gguf", tmp_path / "weighted.gguf"
    quantize_file(kquant_tiny, plain, QuantizeOptions("Q4_K_M"), n_threads=2)
    quantize_file(kquant_tiny, weighted, QuantizeOptions("Q4_K_M", has_imatrix=True), n_threads=2, imatrix=im)
    name = "blk.0.attn_q.weight"
    assert not np.array_equal(_core.GgufFile(str(plain)).tensor_data(name),
                              _core.GgufFile(str(weighted)).tensor_data(name))


# Relative RMS difference from the F32 logits with an importance matrix, measured: IQ3_XS 0.33,
# IQ3_S 0.32, IQ3_M 0.30, IQ3_XXS 0.37, IQ2_M 0.41, IQ2_S 0.47, IQ2_XS 0.60, IQ2_XXS 0.64, IQ1_M 0.70,
# IQ1_S 0.73 (random weights; bounds ~1.4x, capped where the bound would say nothing).
IQ_PRESET_BOUND = {"IQ3_XS": 0.46, "IQ3_S": 0.49, "IQ3_M": 0.46, "IQ3_XXS": 0.52, "IQ2_M": 0.57, "IQ2_S": 0.65,
                   "IQ2_XS": 0.84, "IQ2_XXS": 0.9, "IQ1_M": 0.95, "IQ1_S": 0.95}


def test_iq_presets_with_an_importance_matrix_quantize_and_run(kquant_tiny, tmp_path):
    """Every i-quant preset (all but IQ3_S and IQ3_M need the importance matrix) stays near the F32
    logits."""
    with pytest.raises(EdgeInferError, match=r"IQ3_XS needs an importance matrix"):
        quantize_file(kquant_tiny, tmp_path / "q.gguf", QuantizeOptions("IQ3_XS"))
    model = Model.load(kquant_tiny, n_ctx=64, n_threads=2)
    im = collect(model, TEXT, n_ctx=32, n_chunks=2).imatrix
    ids = list(range(3, 40))
    ref = model.eval_logits(ids)
    for preset, bound in IQ_PRESET_BOUND.items():
        out = tmp_path / f"{preset}.gguf"
        result = quantize_file(kquant_tiny, out, QuantizeOptions(preset, has_imatrix=True), n_threads=2, imatrix=im)
        assert result.notices == []
        assert _core.GgufFile(str(out)).get("general.file_type") == int(FT[f"MOSTLY_{preset}"])
        logits = Model.load(out, n_ctx=64, n_threads=2).eval_logits(ids)
        rel = float(np.sqrt(np.mean((logits - ref) ** 2) / np.mean(ref ** 2)))
        assert rel <= bound, (preset, rel)


def test_cli_imatrix_then_quantize_iq3_xs(kquant_tiny, tmp_path):
    text, im, out = tmp_path / "calib.txt", tmp_path / "im.gguf", tmp_path / "q.gguf"
    text.write_text(TEXT)
    r = run_cli("imatrix", str(kquant_tiny), "-f", str(text), "-c", "32", "--chunks", "2", "-o", str(im))
    assert r.returncode == 0, r.stderr
    r = run_cli("quantize", "--imatrix", str(im), str(kquant_tiny), str(out), "IQ3_XS", "-t", "2")
    assert r.returncode == 0, r.stderr
    types = {t["name"]: T(t["type"]) for t in _core.GgufFile(str(out)).tensors()}
    assert types["blk.0.attn_q.weight"] == T.IQ3_XXS and types["blk.0.ffn_down.weight"] == T.IQ3_S


@pytest.fixture(scope="module")
def smollm2_llama_imatrix(llama_imatrix, smollm2_f32_path, fixtures_dir, tmp_path_factory):
    im = tmp_path_factory.mktemp("imatrix-quantize") / "im.gguf"
    subprocess.run([str(llama_imatrix), "-m", str(smollm2_f32_path), "-f", str(fixtures_dir / "eval.txt"),
                    "-c", "128", "--chunks", "2", "-t", "2", "-o", str(im)], check=True, capture_output=True)
    return im


@pytest.mark.parametrize("preset", ["Q4_0", "Q4_K_M"])
def test_smollm2_files_equal_llama_quantizes_with_the_same_imatrix(preset, smollm2_llama_imatrix, smollm2_f32_path,
                                                                   tmp_path):
    """Q4_0, whose rules an importance matrix changes, and Q4_K_M (SmolLM2's: mostly Q5_0, Q4_K,
    Q6_K): whole files, metadata included (tests/test_quantize_imatrix.py checks every type's
    bytes; IQ4_XS's files were compared too, by hand: identical, but its quantizers take a minute)."""
    im = smollm2_llama_imatrix
    theirs, ours = tmp_path / "llama.gguf", tmp_path / "ours.gguf"
    subprocess.run([str(llamacpp_tool("llama-quantize")), "--imatrix", str(im), str(smollm2_f32_path), str(theirs),
                    preset, "2"], check=True, capture_output=True)
    r = run_cli("quantize", "--imatrix", str(im), str(smollm2_f32_path), str(ours), preset, "-t", "2")
    assert r.returncode == 0, r.stderr
    assert ours.read_bytes() == theirs.read_bytes()
