"""The chat loops: interactive (prompt-toolkit input, streamed answers, commands) and piped (one
message per line from stdin, only the answers on stdout).

While an answer streams from a terminal, SIGINT only sets a flag that the session checks between
prefill chunks and after every piece, so Ctrl-C stops generation between two steps (never inside
the core or half-way through updating the prompt cache) and the partial answer stays in the
conversation. With piped input, Ctrl-C ends the program as usual.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Generator, Iterable, Iterator

from edgeinfer.errors import EdgeInferError
from edgeinfer.reasoning import Reasoning
from edgeinfer.repl.commands import COMMANDS, SETTABLE, ChatOptions, CommandContext, Outcome, is_command, run_command
from edgeinfer.repl.render import Renderer
from edgeinfer.repl.session import TurnStats
from edgeinfer.text_check import not_utf8

StartTurn = Callable[[Callable[[], bool]], Generator[str, None, TurnStats]]


class StopFlag:
    """Set by Ctrl-C while an answer streams; the session polls it."""

    def __init__(self) -> None:
        self.is_set = False

    def __call__(self) -> bool:
        return self.is_set


@contextmanager
def ctrl_c_sets(flag: StopFlag) -> Iterator[None]:
    """Within the block, Ctrl-C (SIGINT) sets `flag` instead of raising KeyboardInterrupt, and the
    terminal does not echo keys (a "^C" or typed-ahead text would land inside the answer). Only
    when stdin is a terminal, and only in the main thread (the one that receives signals)."""
    if threading.current_thread() is not threading.main_thread() or not _stdin_is_terminal():
        yield
        return

    def handler(signum, frame) -> None:
        flag.is_set = True

    previous = signal.signal(signal.SIGINT, handler)
    try:
        with _no_echo():
            yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _stdin_is_terminal() -> bool:
    try:
        return os.isatty(sys.stdin.fileno())
    except (OSError, ValueError, AttributeError):   # stdin closed or replaced
        return False


@contextmanager
def _no_echo() -> Iterator[None]:
    try:
        import termios
        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)
    except Exception:   # no termios (Windows), or not a terminal after all
        saved = None
    if saved is None:
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~(termios.ECHO | termios.ECHOCTL)
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


def stream_answer(start: StartTurn, out: Renderer, options: ChatOptions) -> TurnStats | None:
    """Runs one turn, printing its pieces, then the stats line; errors a user can act on are
    printed, not raised. Returns the stats (None if the turn failed)."""
    flag = StopFlag()
    with ctrl_c_sets(flag):
        try:
            gen = start(flag)
            while True:
                try:
                    piece = next(gen)
                except StopIteration as done:
                    stats = done.value
                    break
                if isinstance(piece, Reasoning):
                    out.reasoning(piece.text, shown=options.show_reasoning)
                else:
                    out.piece(piece)
        except (EdgeInferError, ValueError) as exc:
            out.end_answer()
            out.error(str(exc))
            return None
    out.end_answer()
    if stats.finish == "cancelled" and stats.tokens == 0:
        out.notice("stopped before the answer began")
        return stats
    if stats.finish == "cancelled":
        out.notice("stopped; the answer so far is kept in the conversation")
    if options.show_stats:
        out.stats(stats)
    return stats


def ask(ctx: CommandContext, text: str, out: Renderer) -> str | None:
    session = ctx.session
    stats = stream_answer(lambda stop: session.ask(text, stop), out, ctx.options)
    return None if stats is not None else "error"


def handle_command(ctx: CommandContext, line: str, out: Renderer) -> str | None:
    """Runs a slash command and prints its outcome; returns "quit", "error" or None."""
    try:
        outcome: Outcome = run_command(ctx, line)
    except (EdgeInferError, ValueError, OSError) as exc:
        outcome = Outcome(str(exc), error=True)
    if outcome.text:
        (out.error if outcome.error else out.info)(outcome.text)
    if outcome.action == "regen":
        if stream_answer(ctx.session.regenerate, out, ctx.options) is None:
            return "error"
    return outcome.action if outcome.action == "quit" else ("error" if outcome.error else None)


def handle_line(ctx: CommandContext, text: str, out: Renderer) -> str | None:
    """A command or a message; returns "quit" to end the chat, "error" if it failed."""
    if not text.strip():
        return None
    if is_command(text):
        return handle_command(ctx, text.strip(), out)
    if text.startswith("//"):
        text = text[1:]   # "//..." sends a message that starts with "/"
    return ask(ctx, text, out)


def run_interactive(ctx: CommandContext, out: Renderer, history: Path | None = None) -> int:
    """The terminal chat, input history in the file `history` (None: not kept); returns the
    exit code."""
    from edgeinfer.repl.terminal import make_prompt_session, read_message

    m = ctx.session.model
    out.banner(ctx.model_name, m.n_ctx, f"{m.cache_type_k}/{m.cache_type_v}", m.n_threads, m.isa)
    prompt = make_prompt_session(COMMANDS, SETTABLE, history)
    while True:
        try:
            text = read_message(prompt)
        except KeyboardInterrupt:
            out.console.print("Ctrl-C stops an answer; to quit, type /bye or press Ctrl-D.", style="dim")
            continue
        except EOFError:
            return 0
        # Ctrl-C while a command runs (say, the prefill of a /load) is ignored rather than
        # raised half-way through an update of the prompt cache; answers poll their own flag.
        with ctrl_c_sets(StopFlag()):
            status = handle_line(ctx, text, out)
        if status == "quit":
            return 0


def run_piped(ctx: CommandContext, out: Renderer, lines: Iterable[bytes], single: bool = False) -> int:
    """One message per line of `lines`, the input's bytes (all of them as one message if
    `single`); slash commands work as in the terminal. A line that is not UTF-8 is an error, and
    the next lines are still read. Returns the exit code: 1 if a message or command failed."""
    if single:
        text = _decoded(b"".join(lines), "standard input", out)
        if text is None:
            return 1
        return 1 if text.strip() and ask(ctx, text.strip(), out) == "error" else 0
    failed = False
    for number, raw in enumerate(lines, 1):
        line = _decoded(raw, f"line {number} of standard input", out)
        if line is None:
            failed = True
            continue
        status = handle_line(ctx, line.rstrip("\r\n"), out)
        if status == "quit":
            break
        failed = failed or status == "error"
    return 1 if failed else 0


def _decoded(raw: bytes, where: str, out: Renderer) -> str | None:
    """`raw` as text, or None once the error that it is not UTF-8 is printed."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        out.error(str(not_utf8(where, exc)))
        return None
