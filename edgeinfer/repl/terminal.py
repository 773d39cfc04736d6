"""Reading messages from a terminal with prompt-toolkit: history kept on disk, multi-line input,
completion of slash commands, and keys that behave.

Multi-line input, two ways: a message that starts with ``\"\"\"`` goes on over several lines until
a line ends with ``\"\"\"`` (Enter inserts a new line meanwhile), and Alt-Enter (Esc then Enter
on terminals without Alt) inserts a new line anywhere. Ctrl-C clears a non-empty line and, on an
empty one, raises KeyboardInterrupt for the caller to explain how to quit; Ctrl-D on an empty
line raises EOFError.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from prompt_toolkit import PromptSession
from prompt_toolkit.application.current import get_app
from prompt_toolkit.completion import Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.filters import Condition
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings


FENCE = '"""'
PROMPT = ">>> "
CONTINUATION = "... "


def open_block(text: str) -> bool:
    """Whether `text` is a \"\"\" block that has not been closed yet."""
    stripped = text.strip()
    return stripped.startswith(FENCE) and (len(stripped) < 2 * len(FENCE) or not stripped.endswith(FENCE))


def unfence(text: str) -> str:
    """The message inside a \"\"\" block (the text itself when it is not one)."""
    stripped = text.strip()
    if stripped.startswith(FENCE):
        stripped = stripped[len(FENCE):]
        if stripped.endswith(FENCE):
            stripped = stripped[:-len(FENCE)]
        return stripped.strip("\n")
    return text


class SlashCompleter(Completer):
    """Completes command names after "/", and the setting names after "/set "."""

    def __init__(self, commands: Iterable[str], settings: Iterable[str]):
        self.commands = sorted(commands)
        self.settings = list(settings)

    def get_completions(self, document: Document, complete_event):
        text = document.text_before_cursor
        if not text.startswith("/") or "\n" in text:
            return
        if " " not in text:
            for name in self.commands:
                if ("/" + name).startswith(text):
                    yield Completion("/" + name, start_position=-len(text))
            return
        command, _, rest = text.partition(" ")
        if command == "/set" and " " not in rest:
            for name in self.settings:
                if name.startswith(rest):
                    yield Completion(name, start_position=-len(rest))


def make_key_bindings() -> KeyBindings:
    kb = KeyBindings()
    in_block = Condition(lambda: open_block(_current_text()))

    @kb.add("enter", filter=in_block)
    def _newline_in_block(event) -> None:
        event.current_buffer.insert_text("\n")

    @kb.add("escape", "enter")
    def _newline(event) -> None:
        event.current_buffer.insert_text("\n")

    @kb.add("c-c")
    def _interrupt(event) -> None:
        buffer = event.current_buffer
        if buffer.text:
            buffer.reset()
        else:
            event.app.exit(exception=KeyboardInterrupt())

    return kb


def _current_text() -> str:
    return get_app().current_buffer.text


def make_prompt_session(commands: Iterable[str], settings: Iterable[str],
                        history: Path | None = None) -> PromptSession:
    """A prompt-toolkit session for chat input; history goes to `history` (None: kept in memory
    only; the file's folder is created if needed)."""
    store: History = InMemoryHistory()
    if history is not None:
        try:
            history.parent.mkdir(parents=True, exist_ok=True)
            store = FileHistory(str(history))
        except OSError:
            pass   # a read-only home: history for this session only
    return PromptSession(
        history=store,
        completer=SlashCompleter(commands, settings),
        complete_while_typing=False,
        key_bindings=make_key_bindings(),
        multiline=False,
        prompt_continuation=lambda width, line_number, wrap_count: CONTINUATION.rjust(width),
    )


def read_message(session: PromptSession) -> str:
    """One message (a \"\"\" block already unwrapped). EOFError on Ctrl-D, KeyboardInterrupt on
    Ctrl-C at an empty line."""
    return unfence(session.prompt(PROMPT))
