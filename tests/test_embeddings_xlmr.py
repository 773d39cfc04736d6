"""XLM-RoBERTa encoders (GGUF architecture bert with a t5 / Unigram vocabulary: bge-m3,
multilingual-e5, the bge-reranker-v2-m3 cross-encoders) end to end: tiny random transformers
XLMRobertaModel / XLMRobertaForSequenceClassification with a tiny Unigram tokenizer carrying a real
precompiled charsmap (support/tiny_xlmr.py), converted by `edgeinfer convert` and by llama.cpp's
converter. The Unigram tokens are the HF tokenizer's on multilingual text (NFKC folding, CJK,
Cyrillic, Hangul, unknown characters, runs of spaces); the embeddings are transformers' pooled
last_hidden_state within cosine 0.9999 for mean and cls pooling; a batch gives each input what it
gets alone; the cross-encoder's pairs are HF's <s> q </s></s> d </s> and its scores transformers'
logits."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

from edgeinfer import Model, _core  # noqa: E402
from edgeinfer.cli import main as cli_main  # noqa: E402
from edgeinfer.errors import ModelFormatError  # noqa: E402
from support.tiny_xlmr import charsmap_of, save_xlmr_folder  # noqa: E402

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Le renard brun rapide saute par-dessus le chien paresseux.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "我想在苹果公司工作。 素早い茶色の狐",
    "빠른 갈색 여우가 게으른 개를 뛰어넘는다.",
    "ﬁnancial ＦＵＬＬＷＩＤＴＨ ①②③ ㍿ ½",        # folded by the charsmap (NFKC)
    "Ünïcödé çharacters: naïve café, Straße, ÉCOLE.",
    "  leading,   inner   and trailing spaces   ",
    "tabs\tand\nnew lines\n\nand more",
    "emoji 🚀🦙 ✅ and unknown letters ʁʃʒ ÆØÅ",   # characters without a token: merged <unk>
    "Hello, world! 12345 + 678 = 13023?",
    "a",
]
QUERY = "quick brown fox"
DOCS = ["The quick brown fox jumps over the lazy dog.", "Быстрая коричневая лиса", "我想在苹果公司工作。", "a"]


def _convert(folder, out):
    assert cli_main(["convert", str(folder), str(out), "--outtype", "f32"]) == 0
    return out


@pytest.fixture(scope="module", params=["mean", "cls"])
def embedder(request, tmp_path_factory):
    """(the transformers model, its tokenizer, edgeinfer's F32 file, the pooling)."""
    from transformers import AutoTokenizer

    tmp = tmp_path_factory.mktemp(f"xlmr-{request.param}")
    model = save_xlmr_folder(tmp / "hf", pooling=request.param)
    return model, AutoTokenizer.from_pretrained(tmp / "hf"), _convert(tmp / "hf", tmp / "model.gguf"), request.param


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    """(the transformers cross-encoder, its tokenizer, edgeinfer's F32 file)."""
    from transformers import AutoTokenizer

    tmp = tmp_path_factory.mktemp("xlmr-rank")
    model = save_xlmr_folder(tmp / "hf", "XLMRobertaForSequenceClassification", pooling=None, num_labels=1)
    return model, AutoTokenizer.from_pretrained(tmp / "hf"), _convert(tmp / "hf", tmp / "rank.gguf")


def test_converted_file_has_llamacpps_keys(embedder):
    _, tok, path, pooling = embedder
    f = _core.GgufFile(str(path))
    assert f.get("general.architecture") == "bert"
    assert f.get("bert.pooling_type") == {"mean": 1, "cls": 2}[pooling]
    assert f.get("bert.context_length") == 64        # 66 positions less padding_idx + 1
    assert f.get("tokenizer.ggml.model") == "t5"
    assert f.get("tokenizer.ggml.add_space_prefix") is True
    assert f.get("tokenizer.ggml.remove_extra_whitespaces") is True
    assert bytes(f.get("tokenizer.ggml.precompiled_charsmap")) == charsmap_of(path.parent / "hf")
    assert [f.get(f"tokenizer.ggml.{k}_token_id") for k in ("bos", "eos", "seperator", "unknown", "padding")] == \
        [0, 2, 2, 3, 1]
    shapes = {t["name"]: t["shape"] for t in f.tensors()}
    assert shapes["position_embd.weight"] == [64, 64]
    assert shapes["token_types.weight"] == [64, 1]
    assert not any(n.startswith(("pooler", "cls")) for n in shapes)


def test_unigram_tokens_match_the_hf_tokenizer(embedder):
    _, tok, path, _ = embedder
    m = Model.load(path, n_ctx=64)
    for text in TEXTS:
        assert m.tokenize(text) == tok(text)["input_ids"], text
    assert m.tokenize("") == [0, 2]
    # A combining mark after a character the charsmap rewrites: llama.cpp (and so we) normalizes
    # byte prefixes, "Ｕ" + U+0301 as one unknown "Ú"; HF's Precompiled normalizer works on grapheme
    # clusters and keeps "U". Pinned to llama.cpp's ids (its llama-server /tokenize gives these).
    assert [m._core.vocab.token_text(i).decode() for i in m.tokenize("\uff35\u0301")] == ["<s>", "\u2581", "<unk>", "</s>"]
    assert m.detokenize(m.tokenize("Straße café", add_special=False)) == "Straße café"


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_embeddings_match_transformers(embedder):
    import torch

    hf, tok, path, pooling = embedder
    m = Model.load(path, n_ctx=64)
    assert m.can_embed and m.pooling == pooling and m.n_embd_out == 64 and not m.can_rerank
    got = m.embed(TEXTS, normalize=False)
    enc = tok(TEXTS, return_tensors="pt", padding=True)   # one forward: pads are masked, and
    with torch.no_grad():                                   # XLM-R gives them no position
        hidden = hf(**enc).last_hidden_state.numpy()
    for text, row, h, mask in zip(TEXTS, got, hidden, enc["attention_mask"].numpy().astype(bool)):
        ref = h[mask].mean(axis=0) if pooling == "mean" else h[0]
        assert _cos(row, ref) >= 0.9999, text


def test_a_batch_gives_each_input_what_it_gets_alone(embedder):
    _, _, path, _ = embedder
    m = Model.load(path, n_ctx=64, n_batch=4)
    together = m.embed(TEXTS)
    alone = np.stack([m.embed(t)[0] for t in TEXTS])
    assert together.tobytes() == alone.tobytes()


def _with_ggml_gelu(hf):
    """`hf` with the GELU ggml computes (llama.cpp's and ours): tanh-GELU of the input rounded to
    F16, looked up as F16. On these random weights erf-GELU moves a rerank score by up to ~2e-3;
    with ggml's, transformers and we agree to ~3e-5, so the 1e-3 check below tests the model."""
    import copy

    import torch

    class GgmlGelu(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.gelu(x.half().float(), approximate="tanh").half().float()

    hf = copy.deepcopy(hf)
    for layer in hf.roberta.encoder.layer:
        layer.intermediate.intermediate_act_fn = GgmlGelu()
    return hf


def test_a_cross_encoder_reranks_as_transformers(reranker):
    import torch

    hf, tok, path = reranker
    hf_ggml = _with_ggml_gelu(hf)
    f = _core.GgufFile(str(path))
    assert f.get("bert.pooling_type") == 4 and f.get("bert.classifier.output_labels") == ["LABEL_0"]
    m = Model.load(path, n_ctx=64)
    assert m.pooling == "rank" and m.can_rerank and m.n_embd_out == 1
    vocab = m._core.vocab
    for doc in DOCS:   # <s> query </s></s> document </s>, as HF pairs them
        pair = vocab.pair(m.tokenize(QUERY, add_special=False), m.tokenize(doc, add_special=False))
        assert pair == tok(QUERY, doc)["input_ids"], doc
    got = m.rerank(QUERY, DOCS)
    with torch.no_grad():
        enc = tok([QUERY] * len(DOCS), DOCS, return_tensors="pt", padding=True)
        ref_ggml, ref = hf_ggml(**enc).logits[:, 0].numpy(), hf(**enc).logits[:, 0].numpy()
    for doc, score, r_ggml, r in zip(DOCS, got, ref_ggml, ref):
        assert abs(score - r_ggml) <= 1e-3 * max(1.0, abs(r_ggml)), doc
        assert abs(score - r) <= 5e-3, doc   # erf-GELU: see _with_ggml_gelu
    assert got.tobytes() == np.concatenate([m.rerank(QUERY, [d]) for d in DOCS]).tobytes()


def test_a_sentencepiece_model_is_read_first_as_llamacpp_does(embedder, tmp_path):
    """Real checkpoints (bge-m3) ship sentencepiece.bpe.model beside tokenizer.json; llama.cpp
    reads the former, realigned to fairseq's ids, so the id past the pieces (HF's <mask>) becomes
    an unused [PAD]; the tokens and the embeddings are those of the tokenizer.json file."""
    _, tok, json_path, pooling = embedder
    save_xlmr_folder(tmp_path / "hf", pooling=pooling, with_sentencepiece_model=True)
    sp_path = _convert(tmp_path / "hf", tmp_path / "sp.gguf")
    a, b = _core.GgufFile(str(json_path)).metadata(), _core.GgufFile(str(sp_path)).metadata()
    n = len(a["tokenizer.ggml.tokens"])
    assert b["tokenizer.ggml.tokens"] == a["tokenizer.ggml.tokens"][:-1] + [f"[PAD{n - 2}]"]
    assert b["tokenizer.ggml.token_type"] == a["tokenizer.ggml.token_type"][:-1] + [5]
    for key in ("precompiled_charsmap", "add_space_prefix", "remove_extra_whitespaces"):
        assert b[f"tokenizer.ggml.{key}"] == a[f"tokenizer.ggml.{key}"], key
    ours, ref = Model.load(sp_path, n_ctx=64), Model.load(json_path, n_ctx=64)
    assert [ours.tokenize(t) for t in TEXTS] == [tok(t)["input_ids"] for t in TEXTS]
    assert ours.embed(TEXTS).tobytes() == ref.embed(TEXTS).tobytes()


def test_what_cannot_be_converted_is_refused_by_name(tmp_path):
    folder = tmp_path / "hf"
    save_xlmr_folder(folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "lora_adaptations": ["retrieval.query"]}))
    with pytest.raises(ModelFormatError, match="lora_adaptations"):
        from edgeinfer.convert import convert_checkpoint
        convert_checkpoint(folder, tmp_path / "x.gguf", "f32")


# llama.cpp's XLMRobertaModel imports sentencepiece's protobuf module even for a tokenizer.json
# (it reads sentencepiece.bpe.model with it); protobuf is not installed here, and the tokenizer.json
# path never touches the module, so a stand-in is put in its place before the converter runs.
LLAMACPP_WITHOUT_PROTOBUF = """
import runpy, sys, types
converter = sys.argv[1]
sys.path.insert(0, converter.rsplit("/", 1)[0])
import sentencepiece
sentencepiece.sentencepiece_model_pb2 = types.ModuleType("sentencepiece.sentencepiece_model_pb2")
sys.modules["sentencepiece.sentencepiece_model_pb2"] = sentencepiece.sentencepiece_model_pb2
sys.argv = [converter] + sys.argv[3:]
runpy.run_path(converter, run_name="__main__")
"""


@pytest.fixture(scope="module")
def llamacpp_files(tmp_path_factory):
    """{kind: (llama.cpp's file, ours)} for a mean-pooling embedder and a cross-encoder, both
    converters of llama.cpp started side by side (each mostly imports torch)."""
    from support.llamacpp_venv import llamacpp_converter, start_llamacpp_converter

    converter = llamacpp_converter()
    if converter is None:
        pytest.skip("no llama.cpp source tree (scripts/llamacpp_bin.py unpacks one)")
    tmp = tmp_path_factory.mktemp("xlmr-llamacpp")
    save_xlmr_folder(tmp / "embedder", pooling="mean")
    save_xlmr_folder(tmp / "reranker", "XLMRobertaForSequenceClassification", pooling=None, num_labels=1)
    runs = {kind: start_llamacpp_converter(converter, tmp / kind, tmp / f"{kind}-theirs.gguf",
                                           run_as=(LLAMACPP_WITHOUT_PROTOBUF, ""))
            for kind in ("embedder", "reranker")}
    files = {kind: (tmp / f"{kind}-theirs.gguf", _convert(tmp / kind, tmp / f"{kind}-ours.gguf")) for kind in runs}
    for run in runs.values():
        log, _ = run.communicate(timeout=300)
        assert run.returncode == 0, log[-2000:]
    return files


@pytest.mark.parametrize("kind", ["embedder", "reranker"])
def test_llamacpps_converter_writes_the_same_file(kind, llamacpp_files):
    theirs_path, ours_path = llamacpp_files[kind]
    theirs, ours = _core.GgufFile(str(theirs_path)), _core.GgufFile(str(ours_path))
    assert {t["name"]: t["shape"] for t in theirs.tensors()} == {t["name"]: t["shape"] for t in ours.tensors()}
    a, b = theirs.metadata(), ours.metadata()
    keys = {k for k in a if not k.startswith("general.")}
    assert {k: a[k] for k in keys} == {k: b.get(k) for k in keys}
    # llama.cpp writes no pooling for a cross-encoder (its users pass --pooling rank): ours says rank.
    t = Model.load(theirs_path, n_ctx=64, pooling="rank" if kind == "reranker" else None)
    o = Model.load(ours_path, n_ctx=64)
    assert [t.tokenize(x) for x in TEXTS] == [o.tokenize(x) for x in TEXTS]
    if kind == "embedder":
        assert t.embed(TEXTS).tobytes() == o.embed(TEXTS).tobytes()
    else:
        assert t.rerank(QUERY, DOCS).tobytes() == o.rerank(QUERY, DOCS).tobytes()


def _fuzz_texts(n: int) -> list[str]:
    """Seeded random strings over the corpus' scripts, spaces, marks the charsmap rewrites and the
    special tokens' texts."""
    import random

    rng = random.Random(1)
    alphabet = list("abcxyzABCXYZ  \t\n.,!?'\"-_0159<>/s") + list(
        "éüßçÆØÅ我想在苹果公司工作。素早い茶色の狐빠른갈색Быстраякоричневая①②③㍿ﬁＦＵＬ½™…‐—\u00a0\u3000\u200b\u0301🚀✅")
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25))) for _ in range(n)]
    return texts + [t + "</s>" + t[:5] + "<mask>" for t in texts[:n // 8]]


@pytest.mark.parametrize("embedder", ["mean"], indirect=True)   # one tokenizer: one run
def test_llamacpps_server_tokenizes_embeds_and_reranks_alike(embedder, reranker, tmp_path):
    """llama.cpp itself on our files: /tokenize (it parses special tokens) gives our ids on a
    random multilingual fuzz, /v1/embeddings and /v1/rerank our floats to ~1e-5 (flash attention
    off: on, its F16 K/V move the scores by ~1e-3)."""
    import httpx

    from support.llamacpp_server import llamacpp_server
    from support.llamacpp_venv import llamacpp_tool

    if llamacpp_tool("llama-server") is None:
        pytest.skip("no llama.cpp build (scripts/llamacpp_bin.py makes one)")
    embed_path, rank_path = embedder[2], reranker[2]
    common = ("-t", "1", "-c", "256", "-np", "1", "-fa", "off")
    with llamacpp_server(embed_path, "--embeddings", *common, log_path=tmp_path / "embed.log") as url, \
            httpx.Client(base_url=url, timeout=60) as http:
        m = Model.load(embed_path, n_ctx=64)
        for text in TEXTS + _fuzz_texts(200):
            theirs = http.post("/tokenize", json={"content": text, "add_special": True}).json()["tokens"]
            assert m.tokenize(text, parse_special=True) == theirs, text
        data = http.post("/v1/embeddings", json={"input": TEXTS}).json()["data"]
        np.testing.assert_allclose(m.embed(TEXTS), [d["embedding"] for d in data], atol=1e-4)
    with llamacpp_server(rank_path, "--reranking", *common, log_path=tmp_path / "rank.log") as url, \
            httpx.Client(base_url=url, timeout=60) as http:
        results = http.post("/v1/rerank", json={"query": QUERY, "documents": DOCS, "top_n": len(DOCS)}).json()["results"]
        theirs = [r["relevance_score"] for r in sorted(results, key=lambda r: r["index"])]
        np.testing.assert_allclose(Model.load(rank_path, n_ctx=64).rerank(QUERY, DOCS), theirs, atol=1e-4)
