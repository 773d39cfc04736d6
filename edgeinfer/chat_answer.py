"""A chat answer read as reasoning, content and tool calls, piece by piece as it streams: the one
reader behind the OpenAI server, the Ollama API and Model.chat, so that all three split an answer
the same way.

The reasoning is read apart first (edgeinfer.reasoning); only the answer reaches the tool-call
reader (edgeinfer.tools.parse). For gpt-oss the reasoning reader also hands on the calls, which
harmony writes as messages of their own. The whole answer is the same object fed the whole text,
so streamed and whole answers agree.
"""
from __future__ import annotations

from typing import Union

from edgeinfer.reasoning import Answer, Reasoning, ReasoningStream, ReasoningStyle
from edgeinfer.tools.formats import ToolFormat
from edgeinfer.tools.parse import ArgumentsDelta, CallStart, ContentDelta, ToolCallStream
from edgeinfer.tools.spec import ToolCall

Event = Union[Reasoning, ContentDelta, CallStart, ArgumentsDelta]


class ChatAnswerStream:
    """`feed` the generated text, then `finish`; each returns the events that can be sent.
    `reasoning`, `content` and `tool_calls` hold the answer read so far (content None when only
    calls were made, as OpenAI sends it)."""

    def __init__(self, reasoning: ReasoningStyle | None = None, tool_format: ToolFormat | None = None):
        self._thinking = ReasoningStream(reasoning, calls=tool_format is not None) if reasoning else None
        self._calls = ToolCallStream(tool_format) if tool_format is not None else None
        self._text = ""   # the answer when neither reader is in use

    @property
    def splits(self) -> bool:
        """Whether the text is read at all (else every piece is content, as generated)."""
        return self._thinking is not None or self._calls is not None

    def feed(self, text: str) -> list[Event]:
        if self._thinking is None:
            return self._answer([Answer(text)])
        return self._answer(self._thinking.feed(text))

    def finish(self, cut: bool = False) -> list[Event]:
        """The held events; `cut`: the answer ended at max_tokens (a call's cut-off start is dropped)."""
        events = self._answer(self._thinking.finish()) if self._thinking is not None else []
        if self._calls is not None:
            events += self._calls.finish(cut)
        return events

    def _answer(self, pieces: list) -> list[Event]:
        events: list[Event] = []
        for piece in pieces:
            if isinstance(piece, Reasoning):
                events.append(piece)
            elif self._calls is not None:
                events += self._calls.feed(piece.text)
            else:
                self._text += piece.text
                events.append(ContentDelta(piece.text))
        return events

    @property
    def reasoning(self) -> str | None:
        return (self._thinking.reasoning or None) if self._thinking is not None else None

    @property
    def content(self) -> str | None:
        return self._calls.content if self._calls is not None else self._text

    @property
    def tool_calls(self) -> list[ToolCall]:
        return self._calls.tool_calls if self._calls is not None else []


def read_answer(text: str, reasoning: ReasoningStyle | None, tool_format: ToolFormat | None,
                cut: bool = False) -> ChatAnswerStream:
    """The whole answer `text`, read (`cut`: it ended at max_tokens)."""
    stream = ChatAnswerStream(reasoning, tool_format)
    stream.feed(text)
    stream.finish(cut)
    return stream
