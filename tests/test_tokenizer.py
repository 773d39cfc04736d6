"""The C++ tokenizer (_core.Vocab): exactly llama.cpp's ids on the SmolLM2 vectors, round trips,
special tokens, the end-of-generation set, speed, and clear errors for what is not supported."""
from __future__ import annotations

import json
import time
from pathlib import Path

import gguf
import pytest

from edgeinfer import _core
from support.byte_level import BYTE_CHARS
from support.gguf_writing import write_out


# --- tiny byte-level vocabularies written with gguf.GGUFWriter ---------------------------------

# Byte tokens, then a few merges: "Ġa" (space + a), "12", "123", "<|eot|>" as a control token.
TINY_MERGES = ["Ġ a", "1 2", "12 3"]


def write_tiny_vocab(path: Path, *, model: str = "gpt2", pre: str | None = "gpt-2",
                     merges: list[str] | None = TINY_MERGES, extra: dict | None = None) -> Path:
    tokens = BYTE_CHARS + ["Ġa", "12", "123", "<|im_end|>", "<|user|>"]
    types = [1] * 259 + [3, 4]  # normal..., control <|im_end|>, user-defined <|user|>
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if merges is not None:
        w.add_token_merges(merges)
    w.add_eos_token_id(259)
    for key, value in (extra or {}).items():
        w.add_bool(key, value)
    write_out(w)
    return path


def tiny_vocab(tmp_path: Path, **kw) -> _core.Vocab:
    path = write_tiny_vocab(tmp_path / "tiny.gguf", **kw)
    return _core.Vocab(_core.GgufFile(str(path)))


# --- SmolLM2 (real model, llama.cpp's ids) ---------------------------------------------------

@pytest.fixture(scope="module")
def smollm2(smollm2_path: Path) -> _core.Vocab:
    return _core.Vocab(_core.GgufFile(str(smollm2_path)))


@pytest.fixture(scope="module")
def smollm2_cases(fixtures_dir: Path) -> list[dict]:
    data = json.loads((fixtures_dir / "tokenizer_smollm2.json").read_text(encoding="utf-8"))
    assert data["bos_added"] is False
    return data["cases"]


def test_smollm2_ids_match_llama_cpp_exactly(smollm2, smollm2_cases):
    wrong = []
    for case in smollm2_cases:
        ids = smollm2.tokenize(case["text"], add_special=True, parse_special=case["parse_special"])
        if ids != case["ids"]:
            wrong.append((case["text"][:60], case["parse_special"], ids[:20], case["ids"][:20]))
    assert not wrong, f"{len(wrong)} of {len(smollm2_cases)} cases differ: {wrong}"


def test_smollm2_detokenize_inverts_tokenize(smollm2, smollm2_cases):
    for case in smollm2_cases:
        ids = smollm2.tokenize(case["text"], add_special=False, parse_special=case["parse_special"])
        assert smollm2.detokenize(ids) == case["text"].encode("utf-8")


def test_smollm2_metadata(smollm2):
    assert smollm2.model == "gpt2"
    assert smollm2.pre == "smollm"
    assert smollm2.n_tokens == len(smollm2) == 49152
    assert (smollm2.add_bos, smollm2.add_eos) == (False, False)
    assert smollm2.token_text(smollm2.bos) == b"<|im_start|>"
    assert smollm2.token_text(smollm2.eos) == b"<|im_end|>"


def test_smollm2_end_of_generation(smollm2):
    im_end, = smollm2.tokenize("<|im_end|>", add_special=False, parse_special=True)
    endoftext, = smollm2.tokenize("<|endoftext|>", add_special=False, parse_special=True)
    im_start, = smollm2.tokenize("<|im_start|>", add_special=False, parse_special=True)
    assert smollm2.is_eog(im_end) and smollm2.is_eog(endoftext)
    assert not smollm2.is_eog(im_start)
    assert not smollm2.is_eog(smollm2.tokenize("hello", add_special=False)[0])
    assert {im_end, endoftext} <= set(smollm2.eog_ids)
    assert smollm2.eog_ids == sorted(smollm2.eog_ids)


def test_smollm2_control_tokens_render_only_when_special(smollm2):
    im_end = smollm2.eos
    assert smollm2.token_type(im_end) == 3  # control
    assert smollm2.token_to_piece(im_end) == b"<|im_end|>"
    assert smollm2.token_to_piece(im_end, special=False) == b""
    world = smollm2.tokenize(" world", add_special=False)
    assert [smollm2.token_to_piece(t) for t in world] == [b" world"]
    assert smollm2.token_text(world[0]) == "Ġworld".encode()


def test_smollm2_special_text_is_plain_text_without_parse_special(smollm2):
    ids = smollm2.tokenize("<|im_start|>", add_special=False, parse_special=False)
    assert smollm2.bos not in ids and len(ids) > 1
    assert smollm2.detokenize(ids) == b"<|im_start|>"


def test_smollm2_pieces_can_split_utf8_characters(smollm2):
    ids = smollm2.tokenize("🙂", add_special=False)
    pieces = [smollm2.token_to_piece(t) for t in ids]
    assert b"".join(pieces) == "🙂".encode()


def test_smollm2_tokenizes_64k_of_text_fast(smollm2, fixtures_dir):
    text = (fixtures_dir / "eval.txt").read_text(encoding="utf-8")
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        ids = smollm2.tokenize(text, add_special=False)
        best = min(best, time.perf_counter() - start)
    assert smollm2.detokenize(ids) == text.encode("utf-8")
    assert best < 0.1, f"tokenizing {len(text)} characters took {best * 1e3:.1f} ms"


def test_smollm2_tokenizes_in_parallel_threads(smollm2, fixtures_dir):
    # tokenize releases the GIL and keeps no state between calls
    from concurrent.futures import ThreadPoolExecutor
    text = (fixtures_dir / "eval.txt").read_text(encoding="utf-8")
    chunks = [text[i:i + 4000] for i in range(0, len(text), 4000)]
    expected = [smollm2.tokenize(c, add_special=False) for c in chunks]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda c: smollm2.tokenize(c, add_special=False), chunks * 4))
    assert got == expected * 4


def test_out_of_range_id_is_an_error(smollm2):
    with pytest.raises(_core.EdgeInferError, match="out of range"):
        smollm2.token_to_piece(smollm2.n_tokens)
    with pytest.raises(_core.EdgeInferError, match="out of range"):
        smollm2.detokenize([-1])


# --- tiny vocabularies: pre-tokenizer choice, special tokens, errors ----------------------------

@pytest.mark.parametrize("pre, ids_4123", [
    ("gpt-2", [52, 258]),           # ' ?\p{N}+': "4123" is one word, "123" merges
    ("llama-bpe", [52, 257, 51]),   # \p{N}{1,3}: "412" "3"
    ("qwen2", [52, 49, 50, 51]),    # \p{N}: one digit per word
    ("smollm", [52, 49, 50, 51]),   # \p{N} split first, then GPT-2
    ("default", [52, 257, 51]),     # GPT-2 words, then \p{N}+, then [0-9]{3}: "412" "3"
])
def test_pre_tokenizer_decides_what_may_merge(tmp_path, pre, ids_4123):
    v = tiny_vocab(tmp_path, pre=pre)
    assert v.pre == pre
    assert v.tokenize("4123", add_special=False) == ids_4123
    assert v.tokenize(" a", add_special=False) == [256]


def test_missing_pre_tokenizer_means_default(tmp_path):
    assert tiny_vocab(tmp_path, pre=None).pre == "default"


def test_unknown_pre_tokenizer_is_a_clear_error(tmp_path):
    with pytest.raises(_core.EdgeInferError, match="unsupported pre-tokenizer 'nonsense'"):
        tiny_vocab(tmp_path, pre="nonsense")


def test_unknown_tokenizer_model_is_named(tmp_path):
    with pytest.raises(_core.EdgeInferError, match="unsupported tokenizer model 'wordpiece-x'"):
        tiny_vocab(tmp_path, model="wordpiece-x")


def test_unknown_tokenizer_model_is_named_in_the_error(tmp_path):
    with pytest.raises(_core.EdgeInferError, match="nonsense"):
        tiny_vocab(tmp_path, model="nonsense")


def test_missing_merges_is_a_format_error(tmp_path):
    with pytest.raises(_core.ModelFormatError, match="merges"):
        tiny_vocab(tmp_path, merges=None)


def test_bpe_merges_by_rank_and_falls_back_to_bytes(tmp_path):
    v = tiny_vocab(tmp_path)
    assert v.tokenize("1234", add_special=False) == [258, 52]   # "12"+"3" then "4" left alone
    assert v.tokenize("héllo", add_special=False) == list("héllo".encode())  # byte tokens
    assert v.detokenize(v.tokenize("héllo ✓ a 12", add_special=False)) == "héllo ✓ a 12".encode()


def test_special_tokens_split_only_as_llama_cpp_does(tmp_path):
    v = tiny_vocab(tmp_path)
    # Control tokens only with parse_special; user-defined tokens always.
    assert v.tokenize("x<|im_end|>", add_special=False, parse_special=True) == [120, 259]
    assert 259 not in v.tokenize("x<|im_end|>", add_special=False, parse_special=False)
    assert v.tokenize("<|user|>1", add_special=False, parse_special=False) == [260, 49]
    assert v.is_eog(259) and v.eog_ids == [259]
    assert v.token_to_piece(260, special=False) == b"<|user|>"  # user-defined always render


def test_add_special_follows_the_file_flags(tmp_path):
    v = tiny_vocab(tmp_path, extra={"tokenizer.ggml.add_eos_token": True})
    assert v.add_eos and not v.add_bos
    assert v.tokenize("a") == [97, 259]
    assert v.tokenize("a", add_special=False) == [97]
    assert v.tokenize("") == [259]


def test_add_bos_without_a_bos_token_is_a_format_error(tmp_path):
    assert tiny_vocab(tmp_path, pre="chatglm-bpe").bos == -1  # this pre-tokenizer has no BOS
    with pytest.raises(_core.ModelFormatError, match="bos"):
        tiny_vocab(tmp_path, pre="chatglm-bpe", extra={"tokenizer.ggml.add_bos_token": True})


def test_llama3_family_adds_bos_by_default(tmp_path):
    v = tiny_vocab(tmp_path, pre="llama-bpe")
    assert v.add_bos and v.bos == 11  # llama.cpp's default BPE BOS id, in range here
    assert v.tokenize("a") == [11, 97]
