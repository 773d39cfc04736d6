"""``edgeinfer run``: stream a continuation of a prompt (or the answer to a ``--chat`` turn) to
stdout, timings to stderr."""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from edgeinfer.cli.args import sampling_options
from edgeinfer.cli.files import read_text_file
from edgeinfer.cli.output import stderr, warnings_on_stderr
from edgeinfer.cli.pull import RichReporter
from edgeinfer.draft_model import DraftModel
from edgeinfer.model import Model
from edgeinfer.pull import resolve_model


# -n -1: a count generation never reaches; the end of the text or of the context stops it.
NO_TOKEN_LIMIT = sys.maxsize


def load_model(model: str | None, n_ctx: int, n_threads: int | None, cache_type_k: str = "f16",
               cache_type_v: str = "f16", gpu: dict | None = None) -> tuple[Any, float]:
    """Resolve MODEL (pulling a known model with progress if needed), load it, and return the
    model and the load time in ms. gpu: Model.load's gpu_layers / device / require_gpu; the
    placement is printed to stderr, one line per device."""
    path = resolve_model(model, reporter=RichReporter(stderr))
    start = time.perf_counter()
    with warnings_on_stderr():
        loaded = Model.load(path, n_ctx=n_ctx, n_threads=n_threads, cache_type_k=cache_type_k,
                            cache_type_v=cache_type_v, **(gpu or {}))
    print_placement(loaded, (cache_type_k, cache_type_v))
    return loaded, (time.perf_counter() - start) * 1000.0


def load_draft(args: argparse.Namespace, model: Any) -> tuple[DraftModel | None, float]:
    """The --draft model (pulled if needed), loaded with `model`'s context size and threads, its
    vocabulary checked against `model`'s, and the load time in ms; None without --draft or with
    --no-speculative."""
    if getattr(args, "draft", None) is None or args.no_speculative:
        return None, 0.0
    path = resolve_model(args.draft, reporter=RichReporter(stderr))
    start = time.perf_counter()
    with warnings_on_stderr():
        draft = DraftModel(Model.load(path, n_ctx=model.n_ctx, n_threads=model.n_threads), model)
    return draft, (time.perf_counter() - start) * 1000.0


def print_placement(model: Any, kv_types: tuple[str, str]) -> None:
    """What went where, one line per device on stderr, when layers were offloaded."""
    if model.placement is not None and model.placement.gpu_layers:
        from edgeinfer.cli.wording import flag_spelling
        from edgeinfer.gpu.placement import describe
        for line in describe(model.placement, kv_types, flag_spelling):
            stderr.print(f"offload: {line}", style="dim", soft_wrap=True, markup=False)


def gpu_options(args: argparse.Namespace) -> dict | None:
    """Model.load's offload arguments from --gpu-layers / --device / --require-gpu (None: not asked)."""
    if getattr(args, "gpu_layers", None) is None:
        return None
    return {"gpu_layers": args.gpu_layers, "device": args.device, "require_gpu": args.require_gpu}


def _read_prompt(args: argparse.Namespace) -> str:
    return args.prompt if args.prompt is not None else read_text_file(args.file)


def _constraint(args: argparse.Namespace) -> dict[str, str]:
    """generate()'s json_schema / grammar from --json-schema / --grammar FILE (the text; the
    model's compiler checks it)."""
    if getattr(args, "json_schema", None) is not None:
        return {"json_schema": read_text_file(args.json_schema)}
    if getattr(args, "grammar", None) is not None:
        return {"grammar": read_text_file(args.grammar)}
    return {}


def _timing(timings: Any, name: str) -> float | None:
    value = timings.get(name) if isinstance(timings, dict) else getattr(timings, name, None)
    return None if value is None else float(value)


def format_stats(result: Any, load_ms: float) -> str:
    """One line: load time, prompt tokens and speed, generated tokens and speed, why it stopped."""
    t = getattr(result, "timings", None) or {}
    parts = [f"load {load_ms:.0f} ms"]
    prompt_tok_s = _timing(t, "prompt_tok_s")
    prompt = f"prompt {result.prompt_tokens} tokens"
    parts.append(prompt + (f" @ {prompt_tok_s:.1f} tok/s" if prompt_tok_s is not None else ""))
    gen_tok_s = _timing(t, "gen_tok_s")
    gen = f"generated {len(result.tokens)} tokens"
    parts.append(gen + (f" @ {gen_tok_s:.1f} tok/s" if gen_tok_s is not None else ""))
    drafts = getattr(result, "drafts", None)
    if drafts is not None and drafts.drafted:
        parts.append(f"drafted {drafts.drafted} tokens, {drafts.accepted} accepted ({drafts.source})")
    parts.append(f"finish: {result.finish_reason}")
    return " · ".join(parts)


def _check_chat_options(args: argparse.Namespace) -> None:
    if args.system is not None and args.chat is None:
        raise ValueError("--system needs --chat (a plain prompt has no system message)")
    if args.no_bos and args.chat is not None:
        raise ValueError("--no-bos does not apply to --chat: the chat template decides the BOS")


def chat_messages(question: str, system: str | None) -> list[dict[str, str]]:
    """The one-turn conversation of ``--chat``, with the ``--system`` message if given."""
    messages = [{"role": "system", "content": system}] if system is not None else []
    return messages + [{"role": "user", "content": question}]


def _start(args: argparse.Namespace, model: Any, draft: DraftModel | None) -> Any:
    """The generator for the prompt or the chat turn the arguments ask for."""
    options = dict(
        max_tokens=NO_TOKEN_LIMIT if args.n_predict is None else args.n_predict,
        **sampling_options(args), stop=args.stop,
        context_overflow="shift" if getattr(args, "context_shift", False) else "stop",
        n_keep=getattr(args, "keep", None), speculative=not args.no_speculative, draft=draft, **_constraint(args),
    )
    if args.chat is not None:
        stderr.print(f"chat template: {model.chat_template.origin}", style="dim", soft_wrap=True)
        return model.chat(chat_messages(args.chat, args.system), **options)
    prompt_text = _read_prompt(args)
    prompt = model.tokenize(prompt_text, add_special=False) if args.no_bos else prompt_text
    return model.generate(prompt, **options)


def main(args: argparse.Namespace) -> int:
    """Run one generation; returns the exit code (130 on Ctrl-C)."""
    _check_chat_options(args)
    model, load_ms = load_model(args.model, args.ctx_size, args.threads, args.cache_type_k, args.cache_type_v,
                                gpu=gpu_options(args))
    draft, draft_ms = load_draft(args, model)
    load_ms += draft_ms
    if getattr(args, "verbose", False):
        stderr.print(model.kv_summary(), style="dim", soft_wrap=True)
    gen = _start(args, model, draft)
    out = sys.stdout
    try:
        while True:
            try:
                piece = next(gen)
            except StopIteration as stop:
                result = stop.value
                break
            out.write(piece)
            out.flush()
    except KeyboardInterrupt:
        gen.close()
        out.write("\n")
        out.flush()
        stderr.print("interrupted")
        return 130
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, and keep Python's exit-time flush
        # of stdout from raising again.
        gen.close()
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    out.write("\n")
    out.flush()
    if result is not None:
        stderr.print(format_stats(result, load_ms), style="dim", soft_wrap=True)
    return 0
