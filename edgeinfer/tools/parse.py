"""Reading an answer back as content and tool calls, piece by piece as it streams.

`ToolCallStream` is fed the generated text as it arrives and says what can be sent: content,
the start of a call (index, id, name) and fragments of its arguments. It never says anything it
must later take back: text that may be the start of the trigger (or trailing whitespace before
it) is held until it is clear, a call starts only once its name is complete, and argument text
is the call's JSON as generated, sent as it grows. The non-streamed answer is the same object fed
the whole text, so both always agree.

The calls region is parsed with the format's fixed text as regular expressions in which
whitespace is flexible, and each call's arguments as one balanced JSON value; under the grammar
(edgeinfer.tools.formats.tool_grammar) the text always parses, and text that does not (an
unconstrained answer) stays content: nothing is lost.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Callable, Union

from edgeinfer.tools.formats import MISTRAL_ID_REGEX, NAME_REGEX, ToolFormat
from edgeinfer.tools.spec import ToolCall, new_call_id


def _pattern(text: str) -> str:
    """A regex for fixed `text`: runs of whitespace match any whitespace; {id} is a call id."""
    out = []
    for part in re.split(r"(\s+|\{id\})", text):
        if not part:
            continue
        if part == "{id}":
            out.append(f"(?:{MISTRAL_ID_REGEX})")
        elif part.isspace():
            out.append(r"\s*")
        else:
            out.append(re.escape(part))
    return "".join(out)


def json_value_end(text: str, pos: int) -> int | None:
    """The index just past the JSON value starting at `pos` (after whitespace), or None if the
    text ends inside it. Objects and arrays are matched by bracket depth outside strings; other
    values by the JSON decoder (a number is complete only once something follows it)."""
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    if pos >= len(text):
        return None
    if text[pos] not in "{[":
        try:
            _, end = json.JSONDecoder().raw_decode(text, pos)
        except json.JSONDecodeError:
            return None
        return end if end < len(text) or text[pos] in '"tfn' else None
    depth, in_string, escaped = 0, False, False
    for i in range(pos, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


@dataclass
class PartialCall:
    name: str
    arguments: str      # the arguments' JSON text so far
    done: bool          # the call's text is complete


class _Scanner:
    """The compiled regular expressions of one format's calls region."""

    def __init__(self, fmt: ToolFormat):
        self.fmt = fmt
        self.shared_begin = fmt.name_prefix.startswith(fmt.begin)
        self.markers = re.compile("".join(f"(?:{_pattern(m)})?" for m in fmt.start_markers) + r"\s*")
        self.begin = re.compile(_pattern(fmt.begin))
        self.head = re.compile(_pattern(fmt.name_prefix) + f"({NAME_REGEX})" + _pattern(fmt.name_suffix))
        self.sep = re.compile(r"\s*" + _pattern(fmt.sep) + r"\s*")
        self.suffix = re.compile(r"\s*" + _pattern(fmt.call_suffix)) if fmt.call_suffix else None

    def scan(self, region: str) -> list[PartialCall]:
        """The calls in `region` (which starts where the calls do), the last possibly partial."""
        pos = self.markers.match(region).end()
        if not self.shared_begin:
            m = self.begin.match(region, pos)
            if not m:
                return []
            pos = m.end()
        calls: list[PartialCall] = []
        while True:
            if calls:
                m = self.sep.match(region, pos)
                if not m:
                    break
                pos = m.end()
            m = self.head.match(region, pos)
            if not m:
                break
            name, start = m.group(1), m.end()
            end = json_value_end(region, start)
            if end is None:
                calls.append(PartialCall(name, region[start:].lstrip(), False))
                break
            arguments = region[start:end].lstrip()
            if self.suffix is not None:
                s = self.suffix.match(region, end)
                if not s:
                    calls.append(PartialCall(name, arguments, False))
                    break
                end = s.end()
            calls.append(PartialCall(name, arguments, True))
            pos = end
        return calls


@dataclass
class ContentDelta:
    text: str


@dataclass
class CallStart:
    index: int
    id: str
    name: str


@dataclass
class ArgumentsDelta:
    index: int
    text: str


Event = Union[ContentDelta, CallStart, ArgumentsDelta]


def _held_prefix(text: str, trigger: str) -> int:
    """Length of the longest tail of `text` that is a proper prefix of `trigger`."""
    for k in range(min(len(trigger) - 1, len(text)), 0, -1):
        if text.endswith(trigger[:k]):
            return k
    return 0


@dataclass
class ToolCallStream:
    """Splits a growing answer into content and tool calls (see the module doc)."""

    fmt: ToolFormat
    make_id: Callable[[], str] | None = None
    text: str = ""
    region_start: int | None = None     # where the calls begin in `text`
    plain: bool = False                 # decided: the answer is text only (llama3's start rule)
    content_sent: int = 0
    ids: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    sent_arguments: list[int] = field(default_factory=list)
    calls_done: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._scanner = _Scanner(self.fmt)
        if self.make_id is None:
            self.make_id = lambda: new_call_id(self.fmt.id_style)

    def feed(self, piece: str) -> list[Event]:
        self.text += piece
        events: list[Event] = []
        if self.region_start is None:
            self._find_region()
            if self.region_start is not None:   # the whitespace before the calls is not content
                end = max(self.content_sent, len(self.text[:self.region_start].rstrip()))
            else:
                end = self._safe_content_end()
            if end > self.content_sent:
                events.append(ContentDelta(self.text[self.content_sent:end]))
                self.content_sent = end
        if self.region_start is not None:
            events += self._call_events()
        return events

    def finish(self, cut: bool = False) -> list[Event]:
        """What is still held when the answer ends: text that turned out not to open a call. When
        the answer was `cut` short (max_tokens), a held start of the trigger ("<tool") is not
        content but the start of a call the limit cut off, and is dropped."""
        end = len(self.text)
        if cut and self.region_start is None and self.fmt.trigger:
            end -= _held_prefix(self.text, self.fmt.trigger)
            while end > self.content_sent and self.text[end - 1].isspace():   # (as before a call)
                end -= 1
        if self.region_start is None and end > self.content_sent:
            events: list[Event] = [ContentDelta(self.text[self.content_sent:end])]
            self.content_sent = end
            return events
        return []

    @property
    def content(self) -> str | None:
        """The answer's text before the calls (None when there is none, as OpenAI sends it): what
        was sent as content once the answer is finished."""
        if self.region_start is None:   # (an empty answer is "", one that was a cut-off call None)
            return self.text[:self.content_sent] or (None if self.text else "")
        return self.text[:self.region_start].rstrip() or None

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The calls whose name is complete, as streamed: the last one's arguments may be cut
        short when the answer was (finish_reason "length"), as OpenAI returns them."""
        calls = self._scanner.scan(self.text[self.region_start:]) if self.region_start is not None else []
        return [ToolCall(self.ids[i], c.name, c.arguments) for i, c in enumerate(calls) if i < len(self.ids)]

    # --- internals ---------------------------------------------------------------------------
    def _find_region(self) -> None:
        if self.plain:
            return
        if not self.fmt.trigger:
            stripped = self.text.lstrip()
            if not stripped:
                return
            opens = ("{", *self.fmt.start_markers)
            if stripped.startswith(opens):
                self.region_start = len(self.text) - len(stripped)
            elif not any(m.startswith(stripped) for m in opens):
                self.plain = True
            return
        index = self.text.find(self.fmt.trigger, max(0, self.content_sent - len(self.fmt.trigger)))
        if index >= 0:
            self.region_start = index

    def _safe_content_end(self) -> int:
        """How much text is surely content: not a possible start of the trigger, and not the
        whitespace that would be dropped before a call."""
        if self.plain:
            return len(self.text)
        if not self.fmt.trigger:
            return self.content_sent    # llama3: undecided until the first visible character
        end = len(self.text) - _held_prefix(self.text, self.fmt.trigger)
        while end > self.content_sent and self.text[end - 1].isspace():
            end -= 1
        return end

    def _call_events(self) -> list[Event]:
        events: list[Event] = []
        for i, call in enumerate(self._scanner.scan(self.text[self.region_start:])):
            if i == len(self.ids):
                self.ids.append(self.make_id())
                self.names.append(call.name)
                self.sent_arguments.append(0)
                self.calls_done.append(False)
                events.append(CallStart(i, self.ids[i], call.name))
            if len(call.arguments) > self.sent_arguments[i]:
                events.append(ArgumentsDelta(i, call.arguments[self.sent_arguments[i]:]))
                self.sent_arguments[i] = len(call.arguments)
            self.calls_done[i] = call.done
        return events
