"""Running a text generator (Model.generate / chat, stream_generate) to its end."""
from __future__ import annotations

from typing import Generator

from edgeinfer.generate import GenerationResult


def drain(gen: Generator[str, None, GenerationResult]) -> tuple[list[str], GenerationResult]:
    """The pieces the generator yielded, and its return value."""
    pieces = []
    while True:
        try:
            pieces.append(next(gen))
        except StopIteration as done:
            return pieces, done.value
