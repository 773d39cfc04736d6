"""GPT-2's byte-level BPE alphabet: each byte as a printable character (printable ASCII and
Latin-1 bytes stand for themselves, the others for U+0100 upwards in byte order)."""
from __future__ import annotations


def _byte_chars() -> list[str]:
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, n = [], 0
    for b in range(256):
        if b in printable:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + n))
            n += 1
    return chars


BYTE_CHARS: list[str] = _byte_chars()   # BYTE_CHARS[b]: the character byte b is written as
