"""The model's GGUF vocabulary as an llguidance tokenizer.

llguidance needs every token's bytes and the ids that end generation. Token bytes come from the
core's own detokenizer (`token_to_piece(id, special=True)`), so they are exactly what the text
would hold: byte-level BPE symbols are already mapped back to bytes, SentencePiece's '▁' is a
space and a `<0xNN>` byte token is the byte NN.

Special tokens must never appear inside constrained text. llguidance treats a token whose bytes
start with 0xFF (never valid UTF-8) as special: no grammar terminal matches it, only an explicit
special-token reference does, and the end-of-generation ids are allowed only where the grammar may
stop. So control, unknown and unused tokens get that prefix, as do user-defined tokens spelled
like tags (Gemma's `<start_of_image>`, `<table>`): the rule llama.cpp's llguidance glue uses.
User-defined runs of spaces or newlines stay ordinary text.

Building takes about a second on a 262k vocabulary (Gemma 3), most of it inside llguidance, so
the result is cached on the Model.
"""
from __future__ import annotations

from typing import Sequence

import llguidance

from edgeinfer import _core

# llama.cpp's token types (see _core.Vocab.token_type)
_UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED = 2, 3, 4, 5
SPECIAL_PREFIX = b"\xff"


def token_bytes(vocab: _core.Vocab, token: int) -> bytes:
    """The bytes llguidance sees for `token`: its text, SPECIAL_PREFIX first if it is special."""
    piece = vocab.token_to_piece(token, True)
    kind = vocab.token_type(token)
    special = kind in (_UNKNOWN, _CONTROL, _UNUSED) or (
        kind == _USER_DEFINED and piece.startswith(b"<") and piece.endswith(b">"))
    return SPECIAL_PREFIX + piece if special else piece


class _VocabAdapter:
    """The duck-typed tokenizer `llguidance.TokenizerWrapper` reads (tokens, ids, and a call that
    tokenizes text without BOS/EOS)."""

    def __init__(self, vocab: _core.Vocab, tokens: Sequence[bytes]):
        self._vocab = vocab
        self.tokens = tokens
        self.eos_token_id = vocab.eos if vocab.eos >= 0 else vocab.eog_ids[0]
        self.bos_token_id = vocab.bos if vocab.bos >= 0 else None
        self.special_token_ids = [i for i, t in enumerate(tokens) if t.startswith(SPECIAL_PREFIX)]

    def __call__(self, text: str | bytes) -> list[int]:
        return self._vocab.tokenize(text, False, False)


def make_lltokenizer(vocab: _core.Vocab, n_vocab: int) -> llguidance.LLTokenizer:
    """llguidance's tokenizer for `vocab`; `n_vocab` is the logits' width (may exceed the vocabulary).
    Every end-of-generation id counts as an end the grammar may accept."""
    if not vocab.eog_ids:
        raise ValueError("the vocabulary has no end-of-generation token: constrained decoding needs one")
    tokens = [token_bytes(vocab, i) for i in range(vocab.n_tokens)]
    wrapper = llguidance.TokenizerWrapper(_VocabAdapter(vocab, tokens))
    return llguidance.LLTokenizer(wrapper, n_vocab=n_vocab, eos_token=list(vocab.eog_ids))
