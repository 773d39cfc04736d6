"""How each model family writes tool calls, defined once per family: the text around a call, the
trigger that opens the calls, and from these the grammar that enforces them, the parser that
reads them back and the text that shows past calls to a template that cannot.

A family's calls region is `begin + call (sep call)* + end`, each call being
`name_prefix NAME name_suffix ARGS call_suffix`, exactly as the family's own chat template
writes an assistant's tool calls (JSON with ", " and ": " separators: Jinja's `tojson`):

    hermes        <tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>   (Qwen 2.5/3, Hermes,
                  Granite 4) calls separated by "\\n"
    llama3        {"name": "f", "parameters": {...}}   at the very start, after an optional
                  <|python_tag|>; one call per turn (Llama 3.1-3.3)
    granite       <|tool_call|>[{"name": "f", "arguments": {...}}, ...]   (Granite 3.x)
    mistral       [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "a1b2c3d4e"}, ...] (Nemo)
    mistral_args  [TOOL_CALLS]f[ARGS]{...}   repeated per call (Mistral Small 3.2, Devstral,
                  Ministral 3; with [CALL_ID]id before [ARGS] where the template writes one)
    generic       hermes' text, for templates with no tool support: the tools and this format
                  are described in a preamble (see edgeinfer.tools.prompt)
    harmony       gpt-oss: a message to a recipient, `<|channel|>commentary to=functions.f
                  <|constrain|>json<|message|>{...}<|call|>` (or the recipient in the role part:
                  ` to=functions.f<|channel|>commentary json<|message|>`), after any analysis
                  messages; one call per turn (<|call|> ends the generation). The reader of harmony
                  messages (edgeinfer.reasoning) hands a call on as `<|start|>assistant
                  to=functions.f<|message|>{...}`, which is the text this format parses; the
                  grammar (harmony_grammar) is written for the model's own messages.

The family is identified from the template text (the markers it writes), never from the file
name. Markers that the vocabulary holds as special tokens are matched as those tokens.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from edgeinfer.reasoning import CHANNEL, END, HARMONY_CALL, MESSAGE, RECIPIENT, START
from edgeinfer.tools.spec import Tool, ToolCall, ToolChoice

# Compact-but-natural JSON for arguments: the separators Jinja's tojson (json.dumps) writes, which
# is what every family's template shows the model; no free whitespace (see constrain.grammar).
ARGUMENT_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

NAME_REGEX = r"[A-Za-z0-9_-]+"
MISTRAL_ID_REGEX = r"[A-Za-z0-9]{9}"


@dataclass(frozen=True)
class ToolFormat:
    name: str
    trigger: str            # text that opens the calls region ("" = only at the start of the answer)
    begin: str              # the region's first text (starts with the trigger)
    name_prefix: str
    name_suffix: str        # may hold {id}: the place of a 9-character call id
    call_suffix: str        # may hold {id} too
    sep: str = ""
    end: str = ""
    single_call: bool = False   # the family's template shows one call per turn
    id_style: str = "openai"    # "mistral": 9 letters and digits
    start_markers: tuple[str, ...] = ()   # optional special text before the region (llama3's <|python_tag|>)
    json_separators: tuple[str, str] = (", ", ": ")   # between items, between key and value
    grammar_markers: tuple[str, ...] = ()  # special text the grammar writes besides the call text

    @property
    def markers(self) -> tuple[str, ...]:
        """Every piece of fixed text that may be one special token of a vocabulary."""
        texts = (self.begin, self.name_prefix, self.name_suffix, self.call_suffix, self.sep, self.end,
                 *self.start_markers, *self.grammar_markers)
        found = []
        for text in texts:
            found += re.findall(r"<\|?/?[A-Za-z_]+\|?>|\[/?[A-Z_]+\]", text)
        return tuple(dict.fromkeys(found))

    # --- text of past calls (for templates that cannot show them) -----------------------------
    def calls_text(self, calls: Sequence[tuple[str, Any, str]]) -> str:
        """The text a model of this family writes for `calls` ((name, arguments, id) each)."""
        parts = []
        for name, arguments, call_id in calls:
            args = json.dumps(arguments, ensure_ascii=False)
            parts.append(self.name_prefix + name + self.name_suffix.replace("{id}", call_id) + args
                         + self.call_suffix.replace("{id}", call_id))
        body = self.sep.join(parts)
        # `begin` holds the first call's prefix in families whose every call repeats it (hermes).
        if self.begin and not body.startswith(self.begin):
            body = self.begin + body
        return body + self.end


HERMES = ToolFormat("hermes", trigger="<tool_call>", begin="<tool_call>",
                    name_prefix='<tool_call>\n{"name": "', name_suffix='", "arguments": ',
                    call_suffix="}\n</tool_call>", sep="\n")
GENERIC = ToolFormat(**{**HERMES.__dict__, "name": "generic"})
LLAMA3 = ToolFormat("llama3", trigger="", begin="", name_prefix='{"name": "', name_suffix='", "parameters": ',
                    call_suffix="}", single_call=True, start_markers=("<|python_tag|>",))
GRANITE = ToolFormat("granite", trigger="<|tool_call|>", begin="<|tool_call|>[", name_prefix='{"name": "',
                     name_suffix='", "arguments": ', call_suffix="}", sep=", ", end="]")
MISTRAL = ToolFormat("mistral", trigger="[TOOL_CALLS]", begin="[TOOL_CALLS][", name_prefix='{"name": "',
                     name_suffix='", "arguments": ', call_suffix=', "id": "{id}"}', sep=", ", end="]",
                     id_style="mistral")
MISTRAL_ARGS = ToolFormat("mistral_args", trigger="[TOOL_CALLS]", begin="[TOOL_CALLS]", name_prefix="[TOOL_CALLS]",
                          name_suffix="[ARGS]", call_suffix="", id_style="mistral")
MISTRAL_CALL_ID = ToolFormat(**{**MISTRAL_ARGS.__dict__, "name": "mistral_call_id",
                                "name_suffix": "[CALL_ID]{id}[ARGS]"})

# gpt-oss writes its arguments compactly ({"a":1}), unlike its template's tojson.
HARMONY = ToolFormat("harmony", trigger=HARMONY_CALL, begin=HARMONY_CALL, name_prefix=HARMONY_CALL,
                     name_suffix=MESSAGE, call_suffix="", single_call=True, json_separators=(",", ":"),
                     grammar_markers=(CHANNEL, END, "<|constrain|>"))

FORMATS = {f.name: f for f in (HERMES, GENERIC, LLAMA3, GRANITE, MISTRAL, MISTRAL_ARGS, MISTRAL_CALL_ID, HARMONY)}


def detect_format(template_source: str, renders_tools: bool) -> ToolFormat:
    """The family whose markers the template writes; GENERIC when the template does not render
    the tools it is given (whatever markers it holds: the model was shown none)."""
    if not renders_tools:
        return GENERIC
    if CHANNEL in template_source and MESSAGE in template_source:   # as edgeinfer.reasoning finds harmony
        return HARMONY
    if "[TOOL_CALLS]" in template_source:
        if "[CALL_ID]" in template_source:
            return MISTRAL_CALL_ID
        return MISTRAL_ARGS if "[ARGS]" in template_source else MISTRAL
    if "<|tool_call|>" in template_source:
        return GRANITE
    if "<tool_call>" in template_source:
        return HERMES
    if "<|start_header_id|>" in template_source and '"parameters"' in template_source:
        return LLAMA3
    return GENERIC


# --- grammar -----------------------------------------------------------------------------------

def _literal(text: str, special_ids: Mapping[str, int]) -> str:
    """Lark for fixed `text`: markers the vocabulary holds as special tokens become token
    references (a string literal never matches a special token), the rest string literals."""
    out = []
    pattern = "|".join(re.escape(m) for m in sorted(special_ids, key=len, reverse=True))
    pos = 0
    for m in (re.finditer(pattern, text) if pattern else ()):
        if m.start() > pos:
            out.append(json.dumps(text[pos:m.start()]))
        out.append(f"<[{special_ids[m.group()]}]>")
        pos = m.end()
    if pos < len(text):
        out.append(json.dumps(text[pos:]))
    return " ".join(out) if out else '""'


def _with_id(text: str, special_ids: Mapping[str, int]) -> str:
    """Lark for fixed text that may hold the {id} placeholder ("" for no text)."""
    parts = text.split("{id}")
    lark = [_literal(p, special_ids) for p in parts if p]
    if len(parts) == 2:
        lark.insert(1 if parts[0] else 0, f"/{MISTRAL_ID_REGEX}/")
    return " ".join(lark)


def tool_grammar(fmt: ToolFormat, tools: Sequence[Tool], choice: ToolChoice, parallel: bool,
                 special_ids: Mapping[str, int], bounded: Callable[[str], dict]) -> str:
    """The Lark grammar (llguidance's dialect) for an answer under `choice`:
      auto      free text, then optionally the calls region (opened by the trigger);
      required  the calls region only, any of the tools;
      function  the calls region only, the named tool.
    Each call's arguments follow `bounded(tool name)`, its `parameters` made finishable. With
    `parallel` false, or a family that shows one call per turn, exactly one call."""
    chosen = [t for t in tools if choice.mode != "function" or t.name == choice.function]
    lit = lambda text: _literal(text, special_ids)   # noqa: E731
    if fmt is HARMONY:
        return harmony_grammar(chosen, choice, lit, lambda name: _arguments(fmt, bounded, name))

    def calls_of(prefix: str) -> str:
        """Alternatives: a call of each chosen tool, starting with `prefix` then the name."""
        return " | ".join(
            f"{lit(prefix + tool.name)} {_with_id(fmt.name_suffix, special_ids)} {_arguments(fmt, bounded, tool.name)} "
            f"{_with_id(fmt.call_suffix, special_ids)}" for tool in chosen)

    many = parallel and not fmt.single_call
    more = (f"({lit(fmt.sep)} call)*" if fmt.sep else "call*") if many else ""
    end = lit(fmt.end) if fmt.end else ""
    # In some families `begin` is the first call's own prefix (hermes: every call opens with
    # <tool_call>); in the others it is written once before the first call.
    shared_begin = fmt.name_prefix.startswith(fmt.begin)
    rules = ["%llguidance {}", f"call: {calls_of(fmt.name_prefix)}"]
    head = "" if shared_begin else lit(fmt.begin)
    rules.append(f"calls: {head} call {more} {end}")
    markers = " ".join(f"{lit(m)}?" for m in fmt.start_markers)
    if choice.forces_call:
        rules.append(f"start: {markers} calls")
    elif not fmt.trigger:
        # Calls only at the very start (llama3): an answer that begins otherwise is text.
        rules += [f"start: TEXT_NOT_CALL? | {markers} calls", r"TEXT_NOT_CALL: /[^{](.|\n)*/"]
    elif fmt.trigger in special_ids:
        # Free text cannot hold a special token, so the trigger token starts the calls.
        rules += ["start: TEXT? calls?", r"TEXT: /(.|\n)+/"]
    else:
        # A trigger of ordinary text: the lazy lexeme ends the free text at its first
        # occurrence, so the constraint switches on exactly when the model opens a call.
        if shared_begin:
            first = f"first_call {more} {end}"
            rules.append(f"first_call: {calls_of(fmt.name_prefix[len(fmt.trigger):])}")
        else:
            first = f"{lit(fmt.begin[len(fmt.trigger):])} call {more} {end}"
        rules += ["start: TEXT? | trigger " + first, f"trigger[lazy]: TEXT? {lit(fmt.trigger)}",
                  r"TEXT: /(.|\n)+/"]
    return "\n".join(rules) + "\n"


def _arguments(fmt: ToolFormat, bounded: Callable[[str], dict], name: str) -> str:
    """Lark for one call's arguments: `%json` of the tool's finishable schema, written with the
    family's separators."""
    item, key = fmt.json_separators
    options = {**ARGUMENT_JSON_OPTIONS, "item_separator": item, "key_separator": key}
    return f"%json {json.dumps({**bounded(name), 'x-guidance': options})}"


def harmony_grammar(tools: Sequence[Tool], choice: ToolChoice, lit: Callable[[str], str],
                    arguments: Callable[[str], str]) -> str:
    """gpt-oss's answer as llama.cpp's grammar for it has it (common/parsers/gpt-oss.cpp): any
    analysis and commentary (preamble) messages, each followed by `<|start|>assistant`, then a
    call (or, under "auto", a final message). The text starts after the generation prompt's
    `<|start|>assistant`; all markers are special tokens, so free text ends at the next one."""
    name = lit(RECIPIENT + "functions.")
    rules = ["%llguidance {}",
             f"start: (message {lit(START + 'assistant')})* {'call' if choice.forces_call else '(call | final)'}",
             f"message: {lit(CHANNEL)} (\"analysis\" | \"commentary\") {lit(MESSAGE)} TEXT? {lit(END)}",
             f"final: {lit(CHANNEL)} \"final\" {lit(MESSAGE)} TEXT?",
             f"channel: {lit(CHANNEL)} (\"commentary\" | \"analysis\")",
             f"constrain: \" \"? {lit('<|constrain|>')}? \"json\"",
             r"TEXT: /(.|\n)+/"]
    # the recipient in the role part (the template's way) or in the channel part (the model's)
    rules.append("call: " + " | ".join(
        f"{name} \"{t.name}\" channel constrain? {lit(MESSAGE)} {arguments(t.name)}"
        f" | channel {name} \"{t.name}\" constrain? {lit(MESSAGE)} {arguments(t.name)}" for t in tools))
    return "\n".join(rules) + "\n"
