"""The gpt-4o pre-tokenizer (the o200k regex of GPT-4o and gpt-oss): its words are exactly Hugging
Face tokenizers' on a fuzz corpus and on every assigned code point in a few contexts, and a
byte-level BPE trained with it (the shape of gpt-oss's tokenizer.json) gives the same ids
through edgeinfer's vocabulary; the harmony tokens follow llama.cpp's rules (<|return|> and
<|call|> end the generation, <|end|> does not and renders, as do <|channel|> and <|message|>)."""
from __future__ import annotations

import unicodedata

import pytest

from edgeinfer import _core, _testing
from support.o200k import FRAGMENTS, O200K_PATTERN, fuzz_texts, train_o200k_tokenizer, write_o200k_vocab

tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def hf_split():
    split = tokenizers.pre_tokenizers.Split(tokenizers.Regex(O200K_PATTERN), behavior="isolated")
    return lambda text: [piece for piece, _ in split.pre_tokenize_str(text)]


def ours(text: str) -> list[str]:
    return [w.decode("utf-8") for w in _testing.pre_tokenize("gpt-4o", text)]


@pytest.mark.parametrize("text, words", [
    ("HelloWorld HTTPServer's", ["Hello", "World", " HTTPServer's"]),   # upper* lower+, then upper+ lower*
    ("DON'T we'Ve", ["DON'T", " we'Ve"]),                               # contractions in any case
    ("it'\u017f", ["it'\u017f"]),                                          # (?i) folds long s to s
    ("ÉCOLE École", ["ÉCOLE", " École"]),                               # non-ASCII capitals are \p{Lu}
    ("cafe\u0301s", ["cafe\u0301s"]),                                   # \p{M} belongs to the word
    ("\u0301A", ["\u0301", "A"]),                                       # a mark alone is a lower+ first
    ("12345", ["123", "45"]),
    ("a.\r\n/b", ["a", ".\r\n/", "b"]),                                 # punctuation takes [\r\n/]*
    ("x  \n\n  y", ["x", "  \n\n", " ", " y"]),
])
def test_words_pinned(text, words):
    assert ours(text) == words


def test_words_match_hf_tokenizers_on_a_fuzz_corpus(hf_split):
    wrong = [(t, hf_split(t), ours(t)) for t in fuzz_texts(2000, seed=7) + FRAGMENTS if hf_split(t) != ours(t)]
    assert not wrong, f"{len(wrong)} texts differ, first: {wrong[:3]}"


def test_words_match_hf_tokenizers_for_every_assigned_code_point(hf_split):
    """Each character in contexts that reach every alternative: after a case change, doubled,
    after a space, between digits. Unassigned code points are left out: the regex engine may
    know a newer Unicode than the table (edgeinfer's is Python's unicodedata, see
    scripts/gen_unicode_data.py)."""
    wrong = []
    for cp in [*range(0x20, 0x3400), *range(0xA000, 0xD800), *range(0xF900, 0x10000), *range(0x1F000, 0x1FB00)]:
        c = chr(cp)
        if unicodedata.category(c) == "Cn":
            continue
        for text in (f"aB{c}{c}b", f"{c}Ab", f"x {c}\n", f"1{c}2"):
            if hf_split(text) != ours(text):
                wrong.append((hex(cp), text))
                break
    assert not wrong, f"{len(wrong)} code points differ: {wrong[:10]}"


@pytest.fixture(scope="module")
def o200k(tmp_path_factory):
    """(the HF tokenizer, edgeinfer's vocabulary of the same file)."""
    tok = train_o200k_tokenizer(vocab_size=1000)   # enough merges that words of every kind merge
    path = write_o200k_vocab(tmp_path_factory.mktemp("o200k") / "vocab.gguf", tok)
    return tok, _core.Vocab(_core.GgufFile(str(path)))


def test_ids_match_hf_tokenizers(o200k):
    tok, vocab = o200k
    assert vocab.pre == "gpt-4o"
    wrong = []
    for text in fuzz_texts(1000, seed=11):
        want = tok.encode(text, add_special_tokens=False).ids
        got = vocab.tokenize(text, add_special=False, parse_special=False)
        if got != want:
            wrong.append((text, want, got))
        assert vocab.detokenize(got) == text.encode("utf-8")
    assert not wrong, f"{len(wrong)} texts differ, first: {wrong[:3]}"


def test_harmony_tokens_follow_llamacpps_rules(o200k):
    _, vocab = o200k

    def token(text: str) -> int:
        ids = vocab.tokenize(text, add_special=False, parse_special=True)
        assert len(ids) == 1, text
        return ids[0]

    assert vocab.is_eog(token("<|return|>")) and vocab.is_eog(token("<|call|>"))
    assert not vocab.is_eog(token("<|end|>"))   # with <|return|> and <|call|> present, <|end|> is not an end
    for text in ("<|channel|>", "<|message|>", "<|start|>", "<|end|>"):   # rendered for the reasoning reader
        assert vocab.token_to_piece(token(text), special=False) == text.encode()
    assert vocab.token_to_piece(token("<|return|>"), special=False) == b""
