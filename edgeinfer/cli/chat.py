"""``edgeinfer chat``: a terminal chat with a model (see edgeinfer/repl/), or, with stdin not a
terminal, one answer per input line on stdout."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from edgeinfer.cli.args import sampling_options
from edgeinfer.cli.files import read_text_file
from edgeinfer.cli.output import stderr
from edgeinfer.cli.run import gpu_options, load_draft, load_model
from edgeinfer.paths import chat_history_file
from edgeinfer.repl.app import run_interactive, run_piped
from edgeinfer.repl.commands import ChatOptions, CommandContext
from edgeinfer.repl.render import Renderer
from edgeinfer.repl.session import ChatSession, Settings
from edgeinfer.sampling import SamplingParams


def settings_from_args(args: argparse.Namespace) -> Settings:
    return Settings(SamplingParams(**sampling_options(args)), max_tokens=args.max_tokens)


def system_from_args(args: argparse.Namespace) -> str | None:
    if args.system_file is not None:
        return read_text_file(args.system_file).strip() or None
    return args.system or None


def main(args: argparse.Namespace) -> int:
    """Start a chat; returns the exit code."""
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    if args.single and interactive:
        raise ValueError("--single reads the message from piped input (stdin is a terminal)")
    system = system_from_args(args)
    model, _ = load_model(args.model, args.ctx_size, args.threads, args.cache_type_k, args.cache_type_v,
                          gpu=gpu_options(args))
    draft, _ = load_draft(args, model)
    model_name = Path(model.path).name
    model.chat_template   # a model without one fails here, with the reason, not at each message
    if interactive:
        out = Renderer(Console(highlight=False))
        options = ChatOptions(show_stats=not args.no_stats, show_reasoning=not args.hide_reasoning)
    else:
        out = Renderer(stderr, answer_file=sys.stdout)
        options = ChatOptions(show_stats=False, show_reasoning=not args.hide_reasoning)
    session = ChatSession(model, system=system, settings=settings_from_args(args), notify=out.notice,
                          progress=out.progress, speculative=not args.no_speculative, draft=draft)
    ctx = CommandContext(session, options, model_name)
    if interactive:
        return run_interactive(ctx, out, history=None if args.no_history else chat_history_file())
    return run_piped(ctx, out, sys.stdin.buffer, single=args.single)
