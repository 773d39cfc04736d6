"""Text that cannot become UTF-8: the one check every entry point applies before tokenizing.

A Python `str` can hold a lone UTF-16 surrogate (U+D800..U+DFFF): JSON allows the escape
``"\\ud83d"`` on its own, and a front end that cuts a string inside an emoji sends exactly that.
Such text has no UTF-8 encoding, so the tokenizer cannot take it. It is refused with a message
naming where it is, never silently replaced, so the caller learns that its text was cut.
(Paired surrogates in JSON are joined into one code point by the parser and are fine.)

Bytes read as text (a file, standard input) are decoded as UTF-8 strictly, by the reader: decoded
with Python's "surrogateescape", as stdin may be, their bad bytes would arrive here as lone
surrogates, and the message would be about the wrong thing. `not_utf8` is that reader's error.
"""
from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> int | None:
    """Index of the first code point of `text` that has no UTF-8 encoding, or None."""
    found = _SURROGATE.search(text)
    return None if found is None else found.start()


def describe_surrogate(text: str, index: int) -> str:
    return f"a lone UTF-16 surrogate (U+{ord(text[index]):04X}) at character {index}, which has no UTF-8 encoding"


def not_utf8(where: str, exc: UnicodeDecodeError) -> ValueError:
    """The error for text `where` whose bytes are not UTF-8, naming the first bad byte and its
    offset (codecs' own message names neither the input nor, for a large one, a useful place)."""
    return ValueError(f"{where} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start} "
                      "is not valid UTF-8); convert it to UTF-8 first (e.g. with iconv)")


def require_valid_text(text: str, what: str) -> None:
    """Raises ValueError naming `what` if `text` cannot be encoded as UTF-8."""
    index = lone_surrogate(text)
    if index is not None:
        raise ValueError(f"{what} is not valid Unicode text: {describe_surrogate(text, index)} "
                         f"(was a character cut in half?)")
