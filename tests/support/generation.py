"""Driving the decoding loop in tests: a sampler that returns scripted tokens, and running a text
generator (Model.generate / chat, stream_generate) to its end."""
from __future__ import annotations

from typing import Generator, Sequence

from edgeinfer.generate import GenerationResult


def drain(gen: Generator[str, None, GenerationResult]) -> tuple[list[str], GenerationResult]:
    """The pieces the generator yielded, and its return value."""
    pieces = []
    while True:
        try:
            pieces.append(next(gen))
        except StopIteration as done:
            return pieces, done.value


def scripted(tokens: Sequence[int]):
    """A sampler that ignores the logits and returns `tokens` in order."""
    it = iter(tokens)
    return lambda logits, history: next(it)
