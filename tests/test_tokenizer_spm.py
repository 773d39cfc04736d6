"""The SentencePiece-style tokenizer (tokenizer.ggml.model "llama"): exactly llama.cpp's ids on
the Gemma 3 vectors (BOS on and off), round trips, Gemma's end-of-generation set, byte fallback,
streaming byte-fallback pieces, speed, and a tiny hand-made vocabulary that pins merge order,
tie-breaking, the space prefix rule and the BOS defaults."""
from __future__ import annotations

import codecs
import time
from pathlib import Path

import gguf
import pytest

from edgeinfer import _core
from support.gguf_writing import write_out

SP = "\u2581"  # '▁', SentencePiece's stand-in for a space


# --- Gemma 3 270M (real model, llama.cpp's ids) -------------------------------------------------

@pytest.fixture(scope="module")
def gemma3(gemma3_path: Path) -> _core.Vocab:
    return _core.Vocab(_core.GgufFile(str(gemma3_path)))


@pytest.mark.parametrize("name, add_special", [("tokenizer_gemma3_bos", True),
                                               ("tokenizer_gemma3_nobos", False)])
def test_gemma3_ids_match_llama_cpp_exactly(gemma3, load_fixture, name, add_special):
    data = load_fixture(name)
    assert data["bos_added"] is add_special
    wrong = []
    for case in data["cases"]:
        ids = gemma3.tokenize(case["text"], add_special=add_special, parse_special=case["parse_special"])
        if ids != case["ids"]:
            wrong.append((case["text"][:60], case["parse_special"], ids[:20], case["ids"][:20]))
    assert len(data["cases"]) == 36
    assert not wrong, f"{len(wrong)} of {len(data['cases'])} cases differ: {wrong}"


def test_gemma3_greedy_prompts_and_pieces_match_llama_cpp(gemma3, load_fixture):
    # The greedy-decoding vectors record llama.cpp's prompt ids (plain and chat prompts) and the
    # piece of each generated token (common_token_to_piece, special=false).
    for run in load_fixture("greedy_llamacpp_gemma3")["results"]:
        ids = gemma3.tokenize(run["text"], add_special=run["add_special"], parse_special=run["parse_special"])
        assert ids == run["prompt_ids"], run["name"]
        pieces = [gemma3.token_to_piece(t, False).decode("utf-8", "replace") for t in run["gen_ids"]]
        assert pieces == run["gen_pieces"], run["name"]


def test_gemma3_detokenize_inverts_tokenize(gemma3, load_fixture):
    # Gemma sets add_space_prefix false: no space is added, none is removed.
    for case in load_fixture("tokenizer_gemma3_nobos")["cases"]:
        ids = gemma3.tokenize(case["text"], add_special=False, parse_special=case["parse_special"])
        assert gemma3.detokenize(ids, special=True) == case["text"].encode("utf-8")


def test_gemma3_metadata_and_flags(gemma3):
    assert gemma3.model == "llama"
    assert gemma3.n_tokens == len(gemma3) == 262144
    assert (gemma3.bos, gemma3.eos) == (2, 1)  # the file's ids override LLaMA's defaults (1, 2)
    assert (gemma3.add_bos, gemma3.add_eos) == (True, False)
    assert gemma3.tokenize("") == [2] and gemma3.tokenize("", add_special=False) == []
    assert gemma3.token_text(2) == b"<bos>" and gemma3.token_type(2) == 3


def test_gemma3_end_of_generation(gemma3):
    assert gemma3.token_text(106) == b"<end_of_turn>"
    assert gemma3.is_eog(106) and gemma3.is_eog(gemma3.eos)
    assert not gemma3.is_eog(105)  # <start_of_turn>
    assert {1, 106} <= set(gemma3.eog_ids)
    assert gemma3.eog_ids == sorted(gemma3.eog_ids)


def test_gemma3_pieces(gemma3):
    hello, world = gemma3.tokenize("Hello world", add_special=False)
    assert gemma3.token_text(world) == f"{SP}world".encode()
    assert gemma3.token_to_piece(world) == b" world"  # '▁' renders as a space
    assert gemma3.token_to_piece(hello) == b"Hello"
    assert gemma3.token_to_piece(106) == b"<end_of_turn>"
    assert gemma3.token_to_piece(106, special=False) == b""  # control: only when special
    nl = gemma3.tokenize("\n", add_special=False)
    assert gemma3.token_type(nl[0]) == 4 and gemma3.token_to_piece(nl[0], special=False) == b"\n"


@pytest.mark.parametrize("char", ["\U0001F9A9", "\ua66e", "\U000F0000"])  # 🦩, ꙮ, plane-15 private use
def test_gemma3_byte_fallback_for_characters_not_in_the_vocabulary(gemma3, char):
    encoded = char.encode("utf-8")
    ids = gemma3.tokenize(char, add_special=False)
    assert [gemma3.token_text(t) for t in ids] == [f"<0x{b:02X}>".encode() for b in encoded]
    assert all(gemma3.token_type(t) == 6 for t in ids)
    assert [gemma3.token_to_piece(t) for t in ids] == [bytes([b]) for b in encoded]
    assert gemma3.detokenize(gemma3.tokenize(f"a{char}b", add_special=False)) == f"a{char}b".encode()


def test_gemma3_carriage_return_is_a_byte_token(gemma3):
    assert gemma3.tokenize("\r", add_special=False) == [251]  # <0x0D>, as in the llama.cpp vectors
    assert gemma3.token_text(251) == b"<0x0D>"


def test_byte_fallback_pieces_stream_through_an_incremental_utf8_decoder(gemma3):
    # edgeinfer.generate streams token_to_piece(t, False) through this decoder: a character cut
    # into byte tokens must come out whole once its last byte arrives, never as U+FFFD.
    text = "flamingo \U0001F9A9 and ꙮ!"
    ids = gemma3.tokenize(text, add_special=False)
    assert sum(gemma3.token_type(t) == 6 for t in ids) == 7  # 4 + 3 byte tokens
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out = []
    for t in ids:
        out.append(decoder.decode(gemma3.token_to_piece(t, False)))
    out.append(decoder.decode(b"", final=True))
    assert "".join(out) == text
    assert "\ufffd" not in "".join(out)
    emoji_at = next(i for i, t in enumerate(ids) if gemma3.token_text(t) == b"<0xF0>")
    assert out[emoji_at:emoji_at + 4] == ["", "", "", "\U0001F9A9"]


def test_gemma3_loads_and_tokenizes_fast(gemma3_path, gemma3, fixtures_dir):
    f = _core.GgufFile(str(gemma3_path))
    load = min(_timed(lambda: _core.Vocab(f))[0] for _ in range(3))
    text = (fixtures_dir / "eval.txt").read_text(encoding="utf-8")
    best, ids = float("inf"), []
    for _ in range(3):
        elapsed, ids = _timed(lambda: gemma3.tokenize(text, add_special=False))
        best = min(best, elapsed)
    assert gemma3.detokenize(ids) == text.encode("utf-8")
    assert load < 0.15, f"building the 262k-token vocabulary took {load * 1e3:.1f} ms"
    assert best < 0.1, f"tokenizing {len(text)} characters took {best * 1e3:.1f} ms"


def test_gemma3_tokenizes_in_parallel_threads(gemma3, fixtures_dir):
    from concurrent.futures import ThreadPoolExecutor
    text = (fixtures_dir / "eval.txt").read_text(encoding="utf-8")
    chunks = [text[i:i + 4000] for i in range(0, len(text), 4000)]
    expected = [gemma3.tokenize(c, add_special=False) for c in chunks]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda c: gemma3.tokenize(c, add_special=False), chunks * 4))
    assert got == expected * 4


def _timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


# --- a tiny SentencePiece vocabulary written with gguf.GGUFWriter -------------------------------

# ids 0-2: <unk> <s> </s> (LLaMA's layout, so the default ids fit); 3: a control token;
# 4-259: <0x00>..<0xFF>; then pieces with scores (higher merges first).
BASE = ["<unk>", "<s>", "</s>", "<ctl>"] + [f"<0x{b:02X}>" for b in range(256)]
PIECES = {SP: -1.0, "a": -2.0, "b": -2.0, "c": -2.0, "x": -2.0, "y": -2.0, "z": -2.0,
          "ab": -5.0, "bc": -4.0,        # "abc": bc scores higher, so a + bc
          "xy": -3.0, "yz": -3.0,        # "xyz": a tie, so the leftmost pair merges: xy + z
          f"{SP}a": -1.5, f"{SP}{SP}": -6.0}


def write_tiny_spm(path: Path, *, bytes_: bool = True, kv: dict | None = None) -> Path:
    base = BASE if bytes_ else BASE[:4]
    tokens = base + list(PIECES)
    types = [2, 3, 3, 3] + [6] * (len(base) - 4) + [1] * len(PIECES)
    scores = [0.0] * len(base) + list(PIECES.values())
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    for key, value in (kv or {}).items():
        w.add_bool(key, value)
    write_out(w)
    return path


@pytest.fixture
def make_spm(tmp_path: Path):
    def make(**kw) -> tuple[_core.Vocab, dict[str, int]]:
        v = _core.Vocab(_core.GgufFile(str(write_tiny_spm(tmp_path / "spm.gguf", **kw))))
        ids = {v.token_text(i).decode(): i for i in range(v.n_tokens)}
        return v, ids
    return make


def _pieces(v: _core.Vocab, ids: list[int]) -> list[str]:
    return [v.token_text(i).decode() for i in ids]


def test_tiny_spm_merges_by_score_and_ties_go_left(make_spm):
    v, _ = make_spm(kv={"tokenizer.ggml.add_space_prefix": False})
    assert _pieces(v, v.tokenize("abc", add_special=False)) == ["a", "bc"]
    assert _pieces(v, v.tokenize("xyz", add_special=False)) == ["xy", "z"]
    assert _pieces(v, v.tokenize("abcxyz", add_special=False)) == ["a", "bc", "xy", "z"]


def test_tiny_spm_escapes_spaces_and_adds_the_prefix_by_default(make_spm):
    v, _ = make_spm()  # no tokenizer.ggml.add_space_prefix key: llama.cpp's default is true
    # " a  a" -> "▁a▁▁a": both "▁a" (-1.5) merge before "▁▁" (-6) could, which then cannot.
    assert _pieces(v, v.tokenize("a  a", add_special=False)) == [f"{SP}a", SP, f"{SP}a"]
    # The prefix goes before the text and after every special token, control or not.
    ids = v.tokenize("a<ctl>a", add_special=False, parse_special=True)
    assert _pieces(v, ids) == [f"{SP}a", "<ctl>", f"{SP}a"]
    # Without parse_special the control text is plain text (here: bytes), one prefix only.
    ids = v.tokenize("a<ctl>", add_special=False, parse_special=False)
    assert _pieces(v, ids)[0] == f"{SP}a" and "<ctl>" not in _pieces(v, ids)


def test_tiny_spm_no_prefix_when_the_file_says_so(make_spm):
    v, _ = make_spm(kv={"tokenizer.ggml.add_space_prefix": False})
    assert _pieces(v, v.tokenize("a a", add_special=False)) == ["a", f"{SP}a"]
    assert _pieces(v, v.tokenize("<ctl>a", add_special=False, parse_special=True)) == ["<ctl>", "a"]


def test_tiny_spm_byte_fallback(make_spm):
    v, _ = make_spm(kv={"tokenizer.ggml.add_space_prefix": False})
    ids = v.tokenize("aé", add_special=False)
    assert _pieces(v, ids) == ["a", "<0xC3>", "<0xA9>"]
    assert v.detokenize(ids) == "aé".encode()


def test_tiny_spm_without_byte_tokens_uses_unk(make_spm):
    # llama.cpp throws here (byte_to_token finds nothing); we emit the unknown token per byte.
    v, _ = make_spm(bytes_=False, kv={"tokenizer.ggml.add_space_prefix": False})
    assert v.tokenize("aé", add_special=False) == [v.tokenize("a", add_special=False)[0], 0, 0]


def test_tiny_spm_bos_eos_defaults_and_file_flags(make_spm):
    v, ids = make_spm()
    assert (v.bos, v.eos, v.add_bos, v.add_eos) == (1, 2, True, False)  # LLaMA's defaults
    assert v.tokenize("a") == [1, ids[f"{SP}a"]]
    assert v.tokenize("") == [1]
    v, ids = make_spm(kv={"tokenizer.ggml.add_bos_token": False, "tokenizer.ggml.add_eos_token": True})
    assert v.tokenize("a") == [ids[f"{SP}a"], 2]
    assert v.is_eog(2) and not v.is_eog(1)


def test_tiny_spm_detokenize_drops_the_prefix_space_like_llama_cpp(make_spm):
    v, _ = make_spm()
    # llama_detokenize(remove_special=false): one leading space of the first piece goes.
    assert v.detokenize(v.tokenize("a a", add_special=False)) == b"a a"
    # With BOS first the strip lands on BOS, so the prefix space stays (as in llama.cpp).
    assert v.detokenize(v.tokenize("a a"), special=False) == b" a a"
    assert v.detokenize(v.tokenize("a a"), special=True) == b"<s> a a"
    # Pieces themselves are raw: streaming them gives the prefix space.
    assert b"".join(v.token_to_piece(t) for t in v.tokenize("a a", add_special=False)) == b" a a"
