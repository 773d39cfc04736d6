"""What the chat prints: the banner, streamed answers, the stats line, notices and errors.

Answers are written piece by piece as plain text, exactly as the model produced them (no markup
parsing, no re-wrapping), so a streamed answer is never garbled; everything around them goes
through a rich console with styles. A reasoning model's reasoning goes to the console, dimmed,
before the answer (so piped output holds only the answers); hidden, it shows as a transient
"thinking..." line on a terminal.
"""
from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.text import Text

from edgeinfer.repl.session import TurnStats


def format_stats(s: TurnStats) -> str:
    """One line: time to first token, speed, tokens, cached prompt tokens, context use."""
    parts = [f"{s.ttft_s * 1e3:.0f} ms to first token"]
    parts.append(f"{s.gen_tok_s:.1f} tok/s")
    parts.append(f"{s.tokens} tokens")
    parts.append(f"prompt {s.prompt_tokens} ({s.cached_tokens} cached)")
    parts.append(f"context {s.context_used}/{s.n_ctx} ({s.context_left} left)")
    if s.finish == "cancelled":
        parts.append("stopped")
    elif s.finish == "length":
        parts.append("cut: " + ("context full" if s.context_left <= 1 else "max_tokens reached"))
    return " · ".join(parts)


class Renderer:
    """Output of a chat: answers to `answer_file` (default: the console's file), everything else
    to `console`. Piped mode passes stdout for the answers and a stderr console."""

    def __init__(self, console: Console, answer_file: TextIO | None = None):
        self.console = console
        self.file = answer_file if answer_file is not None else console.file
        self._at_line_start = True
        self._progress_shown = False
        self._reasoning_open = False      # reasoning text was written and not yet ended
        self._reasoning_at_line_start = True

    def banner(self, model_name: str, n_ctx: int, kv: str, threads: int, isa: str) -> None:
        self.console.print(Text.assemble(
            (model_name, "bold"), f" · context {n_ctx} · KV {kv} · {threads} threads · {isa}"),
            soft_wrap=True)
        self.console.print("Type /help for commands and keys, Ctrl-D or /bye to quit.", style="dim")

    def progress(self, done: int, total: int) -> None:
        """A transient "reading the prompt" line (terminals only), erased by what comes next."""
        if self.console.is_terminal:
            self.console.file.write(f"\r\x1b[2mreading the prompt: {done}/{total} tokens\x1b[0m\x1b[K")
            self.console.file.flush()
            self._progress_shown = True

    def _erase_progress(self) -> None:
        if self._progress_shown:
            self.console.file.write("\r\x1b[K")
            self._progress_shown = False

    def reasoning(self, text: str, shown: bool = True) -> None:
        """A piece of the model's reasoning: written dimmed, or (`shown` False) only noted."""
        if not shown:
            if self.console.is_terminal and not self._progress_shown:
                self.console.file.write("\r\x1b[2mthinking... (/reasoning on shows it)\x1b[0m\x1b[K")
                self.console.file.flush()
                self._progress_shown = True
            return
        self._erase_progress()
        if text:
            self.console.file.write(f"\x1b[2m{text}\x1b[0m" if self.console.is_terminal else text)
            self.console.file.flush()
            self._reasoning_open = True
            self._reasoning_at_line_start = text.endswith("\n")

    def _end_reasoning(self) -> None:
        """Ends the reasoning with a line break, and a blank line before an answer that follows on
        the same output."""
        if self._reasoning_open:
            self.console.file.write(("" if self._reasoning_at_line_start else "\n")
                                    + ("\n" if self.console.file is self.file else ""))
            self.console.file.flush()
            self._reasoning_open = False

    def piece(self, text: str) -> None:
        self._erase_progress()
        if text:
            self._end_reasoning()
            self.file.write(text)
            self.file.flush()
            self._at_line_start = text.endswith("\n")

    def end_answer(self) -> None:
        self._erase_progress()
        if self._reasoning_open:   # the answer ended in its reasoning (stopped, or cut at max_tokens)
            if not self._reasoning_at_line_start:
                self.console.file.write("\n")
                self.console.file.flush()
            self._reasoning_open = False
        if not self._at_line_start:
            self.file.write("\n")
            self.file.flush()
        self._at_line_start = True

    def stats(self, s: TurnStats) -> None:
        self.console.print(Text(format_stats(s), style="dim"), soft_wrap=True)

    def info(self, text: str) -> None:
        self._erase_progress()
        self.console.print(Text(text), soft_wrap=True)

    def notice(self, text: str) -> None:
        self._erase_progress()
        self.console.print(Text(text, style="yellow"), soft_wrap=True)

    def error(self, text: str) -> None:
        self._erase_progress()
        self.console.print(Text("error: ", style="bold red") + Text(text), soft_wrap=True)
