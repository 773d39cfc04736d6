"""Slash commands: parsing, checking values, and what each one does to a `ChatSession`.

A command returns an `Outcome` (text to show, whether it is an error, and an action the loop must
take: quit, or generate an answer for /regen) instead of printing, so every command can be tested
without a terminal. `COMMANDS` is the one table the help text, the completer and dispatch read.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from edgeinfer.errors import EdgeInferError
from edgeinfer.repl import transcript
from edgeinfer.repl.render import format_stats
from edgeinfer.repl.session import ChatSession
from edgeinfer.sampling import DEFAULTS, parse_option


@dataclass
class Outcome:
    text: str = ""
    error: bool = False
    action: str | None = None   # None, "quit" or "regen"


@dataclass
class ChatOptions:
    """Interface settings that are not sampling options."""

    show_stats: bool = True
    show_reasoning: bool = True   # a reasoning model's thinking, dimmed before the answer


# --- /set ----------------------------------------------------------------------------------------

def _count(text: str) -> int:
    """A /set value that counts something (max_tokens): an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise ValueError(f"expected an integer >= 1, got {text}")
    return value


def _option(name: str) -> Callable[[str], Any]:
    """A parser for the sampling option `name`, checked against its limits like every other entry
    point; "none"/"random"/"off" gives None where the option's default is None (the seed)."""

    def parse(text: str) -> Any:
        if getattr(DEFAULTS, name) is None and text.lower() in ("none", "random", "off"):
            return None
        return parse_option(name, text)

    return parse


# /set NAME -> (the setting it changes, its parser): max_tokens, or a SamplingParams field, whose
# limits check the value.
SETTABLE: dict[str, tuple[str, Callable[[str], Any]]] = {
    name: (setting, _count if setting == "max_tokens" else _option(setting))
    for name, setting in [("temp", "temperature"), ("top_k", "top_k"), ("top_p", "top_p"), ("min_p", "min_p"),
                          ("max_tokens", "max_tokens"), ("seed", "seed"), ("repeat_penalty", "repeat_penalty")]
}


# --- the commands --------------------------------------------------------------------------------

@dataclass
class Command:
    name: str
    usage: str
    help: str
    run: Callable[["CommandContext", str], Outcome]


@dataclass
class CommandContext:
    session: ChatSession
    options: ChatOptions
    model_name: str


def _help(ctx: CommandContext, arg: str) -> Outcome:
    width = max(len(c.usage) for c in COMMANDS.values())
    lines = ["Commands:"]
    lines += [f"  {c.usage:<{width}}  {c.help}" for c in COMMANDS.values() if c.name != "exit"]
    lines += ["",
              "Input:",
              '  """ ... """        a multi-line message: start it with """ and end it with """',
              "  Alt-Enter          new line (or Esc then Enter)",
              "  Up / Down          previous messages (history is kept between sessions)",
              "  Tab                complete a command",
              "  //text             send a message that starts with /",
              "  Ctrl-C             stop the answer (the part so far is kept); clear the line",
              "  Ctrl-D             quit"]
    return Outcome("\n".join(lines))


def _quit(ctx: CommandContext, arg: str) -> Outcome:
    return Outcome(action="quit")


def _clear(ctx: CommandContext, arg: str) -> Outcome:
    ctx.session.clear()
    kept = " (the system prompt is kept)" if ctx.session.system else ""
    return Outcome(f"new conversation{kept}")


def _system(ctx: CommandContext, arg: str) -> Outcome:
    if not arg:
        current = ctx.session.system
        return Outcome(f"system prompt: {current}" if current else
                       "no system prompt (set one with /system TEXT)")
    ctx.session.system = arg
    return Outcome("system prompt set")


def _set(ctx: CommandContext, arg: str) -> Outcome:
    parts = arg.split()
    names = ", ".join(SETTABLE)
    if len(parts) != 2:
        return Outcome(f"usage: /set NAME VALUE, where NAME is one of: {names}", error=True)
    name, text = parts
    if name not in SETTABLE:
        return Outcome(f"unknown setting {name!r}; settable: {names}", error=True)
    attr, parse = SETTABLE[name]
    try:
        value = parse(text)
    except ValueError as exc:
        return Outcome(f"/set {name}: {exc}", error=True)
    ctx.session.settings.set(attr, value)
    return Outcome(f"{name} = {'random' if value is None else value}")


def _show(ctx: CommandContext, arg: str) -> Outcome:
    m = ctx.session.model
    s = ctx.session.settings
    used = m.context.n_past
    lines = [
        f"model          {ctx.model_name}  ({m.path})",
        f"architecture   {m.arch}, {m.n_params / 1e6:.0f}M parameters, trained context {m.n_ctx_train}",
        f"chat template  {m.chat_template.origin}",
        f"context        {m.n_ctx} tokens ({used} in use), KV cache {m.cache_type_k}/{m.cache_type_v} (K/V)",
        f"threads        {m.n_threads}, ISA {m.isa}",
        f"system prompt  {ctx.session.system or '(none)'}",
        f"messages       {len(ctx.session.messages)}",
        "settings       " + ", ".join(
            f"{name}={'random' if s.get(attr) is None else s.get(attr)}"
            for name, (attr, _) in SETTABLE.items()),
        f"stats line     {'on' if ctx.options.show_stats else 'off'}",
        f"reasoning      {'shown' if ctx.options.show_reasoning else 'hidden'}",
        f"speculative    {'on' if ctx.session.speculative else 'off'}"
        + (f" ({ctx.session.draft.stats.source})" if ctx.session.draft is not None else ""),
    ]
    return Outcome("\n".join(lines))


def _switch(arg: str, command: str, what: str, set_to: Callable[[bool], None]) -> Outcome | None:
    """`/command on|off`: sets the switch and says so; another argument is a usage error; none
    gives None (the command then shows the state)."""
    if arg in ("on", "off"):
        set_to(arg == "on")
        return Outcome(f"{what} {arg}")
    if arg:
        return Outcome(f"usage: /{command} [on|off]", error=True)
    return None


def _stats(ctx: CommandContext, arg: str) -> Outcome:
    switched = _switch(arg, "stats", "stats line", lambda on: setattr(ctx.options, "show_stats", on))
    if switched is not None:
        return switched
    last = ctx.session.last_stats
    state = "on" if ctx.options.show_stats else "off"
    if last is None:
        return Outcome(f"no answer yet (stats line {state})")
    return Outcome(f"last answer: {format_stats(last)}\nstats line {state} (/stats on|off)")


def _reasoning(ctx: CommandContext, arg: str) -> Outcome:
    switched = _switch(arg, "reasoning", "reasoning display", lambda on: setattr(ctx.options, "show_reasoning", on))
    if switched is not None:
        return switched
    state = "shown" if ctx.options.show_reasoning else "hidden"
    return Outcome(f"a reasoning model's thinking is {state} (/reasoning on|off); it never goes back to the model")


def _speculative(ctx: CommandContext, arg: str) -> Outcome:
    switched = _switch(arg, "speculative", "speculative decoding",
                       lambda on: setattr(ctx.session, "speculative", on))
    if switched is not None:
        return switched
    state = "on" if ctx.session.speculative else "off"
    return Outcome(f"speculative decoding {state} (/speculative on|off): guessed tokens checked in one "
                   f"pass, the same answers, sooner when they repeat earlier text")


def _path_arg(arg: str, command: str) -> Path:
    try:
        parts = shlex.split(arg)
    except ValueError as exc:
        raise ValueError(f"{command}: {exc}") from None
    if len(parts) != 1:
        raise ValueError(f"usage: {command} FILE")
    return Path(parts[0]).expanduser()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        return f"{exc.strerror}: {exc.filename}"
    return str(exc) or type(exc).__name__


def _save(ctx: CommandContext, arg: str) -> Outcome:
    try:
        path = _path_arg(arg, "/save")
        saved = transcript.save(ctx.session, path, ctx.model_name)
    except (ValueError, OSError, EdgeInferError) as exc:
        return Outcome(f"could not save: {_reason(exc)}", error=True)
    return Outcome(f"saved {len(ctx.session.messages)} messages to {path} "
                   f"and the KV state ({saved.state_tokens} tokens) to {saved.state_path}")


def _load(ctx: CommandContext, arg: str) -> Outcome:
    try:
        path = _path_arg(arg, "/load")
        loaded = transcript.load(ctx.session, path)
    except (ValueError, OSError, EdgeInferError) as exc:
        return Outcome(f"could not load: {_reason(exc)}", error=True)
    lines = [f"loaded {len(ctx.session.messages)} messages from {path}"]
    if loaded.state_tokens is not None:
        lines.append(f"KV state restored: {loaded.state_tokens} tokens, no prefill needed")
    else:
        lines.append(f"KV state not used ({loaded.state_error}); re-read the conversation: "
                     f"{loaded.prefilled} tokens prefilled")
    return Outcome("\n".join(lines))


def _regen(ctx: CommandContext, arg: str) -> Outcome:
    if not any(m["role"] == "user" for m in ctx.session.messages):
        return Outcome("nothing to regenerate: ask something first", error=True)
    return Outcome(action="regen")


COMMANDS: dict[str, Command] = {c.name: c for c in [
    Command("help", "/help", "this help", _help),
    Command("clear", "/clear", "start a new conversation (keeps the system prompt)", _clear),
    Command("system", "/system [TEXT]", "set (or show) the system prompt", _system),
    Command("set", "/set NAME VALUE", "change a setting: " + ", ".join(SETTABLE), _set),
    Command("show", "/show", "settings and model information", _show),
    Command("save", "/save FILE", "save the conversation (JSON) and its KV state (FILE.kvstate)", _save),
    Command("load", "/load FILE", "load a saved conversation and resume it", _load),
    Command("regen", "/regen", "a new answer to the last message", _regen),
    Command("stats", "/stats [on|off]", "the last answer's figures; turn the stats line on/off", _stats),
    Command("reasoning", "/reasoning [on|off]", "show or hide a reasoning model's thinking (dimmed)",
            _reasoning),
    Command("speculative", "/speculative [on|off]", "turn speculative decoding on/off (the same answers)",
            _speculative),
    Command("bye", "/bye", "quit (also /exit, Ctrl-D)", _quit),
    Command("exit", "/exit", "quit", _quit),
]}


def is_command(text: str) -> bool:
    """Whether a line is a slash command (a message may still start with "//")."""
    return text.startswith("/") and not text.startswith("//")


def run_command(ctx: CommandContext, line: str) -> Outcome:
    """Runs one "/name args" line."""
    name, _, arg = line[1:].strip().partition(" ")
    command = COMMANDS.get(name.lower())
    if command is None:
        return Outcome(f"unknown command /{name}; type /help for the list", error=True)
    return command.run(ctx, arg.strip())
