"""The CLI's consoles: results go to stdout, everything else (progress, timings, errors) to
stderr, so ``edgeinfer run ... > out.txt`` captures only the generated text."""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Iterator

from rich.console import Console
from rich.text import Text

from edgeinfer.cli.wording import in_flags

stdout = Console(highlight=False)
stderr = Console(stderr=True, highlight=False)


def print_error(message: str) -> None:
    """One line on stderr: ``error: <message>`` (the message is printed literally, no markup)."""
    stderr.print(Text("error: ", style="bold red") + Text(message), soft_wrap=True)


@contextmanager
def warnings_on_stderr(label: str = "note") -> Iterator[None]:
    """Shows each warning raised inside (every one, not once per place) as one line on stderr,
    ``<label>: <message>``, when it is raised: e.g. a clamped context size or thread count. A
    message naming settings names them by their flags."""
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *rest: stderr.print(
            Text(f"{label}: {in_flags(message)}", style="yellow"), soft_wrap=True)
        yield


def human_bytes(n: int | float) -> str:
    """1234567 -> '1.2 MB' (decimal units, like file managers and PyPI)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")
