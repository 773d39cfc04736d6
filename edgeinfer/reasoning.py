"""A model's reasoning read apart from its answer, piece by piece as it streams, as llama.cpp's
server does by default (reasoning_format "deepseek": the reasoning goes to the message's
`reasoning_content`, the answer to `content`). Two ways of writing it are known:

    harmony   gpt-oss: messages `<|channel|>analysis<|message|>THINKING<|end|>` and
              `<|start|>assistant<|channel|>final<|message|>ANSWER` (the generation prompt ends
              in `<|start|>assistant`; `<|return|>` ends the generation and is not in the text).
              The analysis channel is reasoning; final and commentary without a recipient are
              the answer; a message to a recipient (`... to=functions.f ...`) is a tool call:
              with tools offered (`calls`) it reaches the answer as `HARMONY_CALL` + name +
              `<|message|>` + arguments, the one shape edgeinfer.tools.formats.HARMONY reads
              whichever of gpt-oss's two headers wrote it (recipient in the role or the channel
              part, an optional `<|constrain|>json`); without tools it is dropped, as llama.cpp
              drops unsolicited calls (the built-in browser and python tools).
    think     `<think>THINKING</think>ANSWER` (Qwen3, DeepSeek-R1 and their distills); "open"
              when the generation prompt itself ends in `<think>` (the text then starts inside
              the reasoning).

The style is found from the chat template (the markers it writes), never from the file name.
The markers must reach this reader as text: gpt-oss's vocabulary renders its <|channel|>,
<|message|>, <|start|> and <|end|> tokens even when special tokens are not shown (llama.cpp's
load-time rule, kept in the native vocabulary), and <think> tokens are not control tokens.

`ReasoningStream` never says anything it must take back: text that may be the start of a marker
is held until it is clear, and markers never reach the answer. The whole answer is the same
object fed the whole text, so streamed and whole responses agree.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

from edgeinfer.generate import held_tail

# harmony's markers
START, CHANNEL, MESSAGE, END = "<|start|>", "<|channel|>", "<|message|>", "<|end|>"
CALL_END = "<|call|>"     # ends a call message (an end-of-generation token: seldom in the text)
RECIPIENT = " to="         # before a message's recipient, in its header
# How a call opens in the answer (the template's own words for it): never ordinary answer text,
# since <|start|> ends any message.
HARMONY_CALL = f"{START}assistant to=functions."
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class ReasoningStyle:
    name: str                 # "harmony" or "think"
    open: bool = False        # the generation prompt opened the reasoning (think's `<think>`)
    # The generation continues a part of a message the prompt ends inside ("reasoning" or
    # "content": a prefilled assistant message, edgeinfer.continuation): it starts in that part,
    # and nothing of its start is stripped (it may go on mid-word).
    continued: str = ""
    # reasoning_format "none" (harmony only: think's markers are plain text then): the reasoning
    # stays in the answer with its markers, `<|channel|>analysis<|message|>...<|end|>`, as
    # llama.cpp sends it; other messages' headers still go, and calls are still read.
    raw: bool = False


@dataclass(frozen=True)
class Reasoning:
    text: str


@dataclass(frozen=True)
class Answer:
    text: str


Piece = Union[Reasoning, Answer]


def reasoning_style(template_source: str, prompt_text: str = "") -> ReasoningStyle | None:
    """How the model whose chat template is `template_source` writes its reasoning, None for a
    model that does not; `prompt_text` is the rendered prompt (an open <think> at its end)."""
    if CHANNEL in template_source and MESSAGE in template_source:
        return ReasoningStyle("harmony")
    if THINK_CLOSE in template_source:
        return ReasoningStyle("think", open=prompt_text.rstrip().endswith(THINK_OPEN))
    return None


class ReasoningStream:
    """Feed generated text with `feed`, then call `finish`; each returns the pieces that can be
    sent. `reasoning` and `content` hold everything sent so far. `calls`: harmony's tool calls
    go on in the answer (see the module doc) instead of being dropped."""

    def __init__(self, style: ReasoningStyle, calls: bool = False):
        self.style = style
        self.calls = calls
        self.reasoning = ""
        self.content = ""
        self._buf = ""        # text not read yet (a marker may be starting)
        # harmony: "header" (before <|message|>), "reasoning", "content", "call" or "drop";
        # think: "start" (<think> may come), "reasoning", "content"
        if style.continued:
            self._state = style.continued
        elif style.open:
            self._state = "reasoning"
        else:
            self._state = "header" if style.name == "harmony" else "start"
        # The current part has sent nothing yet (its leading whitespace is dropped).
        self._at_start = not style.continued

    def feed(self, text: str) -> list[Piece]:
        self._buf += text
        out: list[Piece] = []
        while self._step(out, final=False):
            pass
        return out

    def finish(self) -> list[Piece]:
        out: list[Piece] = []
        while self._step(out, final=True):
            pass
        return out

    # --- one step of the reader: True if it consumed something and may go on -------------------
    def _step(self, out: list[Piece], final: bool) -> bool:
        if self._state == "header":
            return self._harmony_header(out, final)
        if self._state == "start":
            return self._think_start(final)
        if self.style.name == "harmony":
            ends = (END, START, CALL_END)
        else:
            ends = (THINK_CLOSE,) if self._state == "reasoning" else ()
        return self._body(out, ends, final)

    def _harmony_header(self, out: list[Piece], final: bool) -> bool:
        buf = self._buf
        # The generation prompt ends in <|start|>assistant, so the first header may begin with
        # the recipient (" to=functions.f<|channel|>commentary json<|message|>").
        openers = (START, CHANNEL, RECIPIENT)
        if buf.startswith(openers):
            i = buf.find(MESSAGE)
            if i < 0:
                if final:   # a header the generation ended inside: nothing of it is text
                    self._buf = ""
                return False
            header = buf[:i]
            self._buf = buf[i + len(MESSAGE):]
            recipient = _recipient(header)
            if recipient is None:
                self._state = "reasoning" if f"{CHANNEL}analysis" in header else "content"
                if self._state == "reasoning" and self.style.raw:
                    self._answer(out, f"{CHANNEL}analysis{MESSAGE}")
            elif self.calls and recipient.startswith("functions."):
                self._state = "call"
                name = recipient[len("functions."):]
                self.content += HARMONY_CALL + name + MESSAGE
                out.append(Answer(HARMONY_CALL + name + MESSAGE))
            else:
                self._state = "drop"
            self._at_start = True
            return True
        if not final and any(m.startswith(buf) for m in openers):
            return False   # may become a header
        if buf:            # text outside any message (a model that skipped the format): the answer
            self._state = "content"
            return True
        return False

    def _think_start(self, final: bool) -> bool:
        stripped = self._buf.lstrip()
        if stripped.startswith(THINK_OPEN):
            self._buf = stripped[len(THINK_OPEN):]
            self._state = "reasoning"
            return True
        if not final and THINK_OPEN.startswith(stripped):
            return False   # "", "<", "<th", ...
        self._state = "content"
        return True

    def _body(self, out: list[Piece], ends: tuple[str, ...], final: bool) -> bool:
        buf = self._buf
        hit = min(((buf.find(m), m) for m in ends if m in buf), default=None)
        if hit is not None:
            i, marker = hit
            self._send(out, buf[:i], whole=True)
            if self._state == "reasoning" and self.style.raw:
                self._answer(out, END)
            if marker == START:   # a new message without <|end|> before it
                self._buf = buf[i:]
            else:
                self._buf = buf[i + len(marker):]
            self._state = "header" if self.style.name == "harmony" else "content"
            self._at_start = True
            return True
        keep = 0 if final else held_tail(buf, ends)
        # Trailing whitespace of the reasoning is held: it is dropped if the reasoning ends there.
        text = buf[:len(buf) - keep]
        if self._state == "reasoning" and not final and not self.style.raw:
            text = text.rstrip()
        self._send(out, text, whole=final)
        self._buf = buf[len(text):]
        return False

    def _send(self, out: list[Piece], text: str, whole: bool) -> None:
        """Sends `text` of the current part; `whole`: the part ends with it."""
        raw = self.style.raw and self._state == "reasoning"
        if self._at_start and not raw:
            text = text.lstrip()
        if whole and self._state == "reasoning" and not raw:
            text = text.rstrip()
        if not text or self._state == "drop":
            return
        self._at_start = False
        if self._state == "reasoning" and not raw:
            self.reasoning += text
            out.append(Reasoning(text))
        else:
            self._answer(out, text)

    def _answer(self, out: list[Piece], text: str) -> None:
        self.content += text
        out.append(Answer(text))


def _recipient(header: str) -> str | None:
    """The recipient a harmony header names (`functions.f`), None for a message to no one."""
    i = header.find(RECIPIENT)
    if i < 0:
        return None
    name = header[i + len(RECIPIENT):]
    return re.split(r"\s|<\|", name, maxsplit=1)[0]
