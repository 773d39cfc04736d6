"""``edgeinfer serve``: the OpenAI-compatible HTTP server (edgeinfer.server) on uvicorn.

The server starts listening at once and loads the model on its engine thread; /health answers
503 until the model is ready, then 200. A model that fails to load stops the server (exit 1).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import warnings
from pathlib import Path

from edgeinfer.cli.args import sampling_options
from edgeinfer.cli.output import print_error, stderr
from edgeinfer.cli.pull import RichReporter
from edgeinfer.cli.run import gpu_options, print_placement
from edgeinfer.cli.wording import in_flags
from edgeinfer.draft_model import DraftModel
from edgeinfer.model import Model
from edgeinfer.pull import resolve_model
from edgeinfer.sampling import SamplingParams

API_KEY_ENV = "EDGEINFER_API_KEY"
SWITCH_INTERVAL_S = 0.0005


def bind_warning(host: str, has_api_key: bool) -> str | None:
    """What to tell the user when `host` exposes the server beyond this machine, else None."""
    from edgeinfer.server.config import is_loopback

    if is_loopback(host):
        return None
    return (f"binding {host} makes the model reachable from other machines"
            + ("" if has_api_key else " by anyone, without a key (consider --api-key)"))


def parallel_slots(args: argparse.Namespace) -> int:
    """--parallel, else the default: parallel slots run on the CPU only, so 1 with offload."""
    from edgeinfer.server.config import DEFAULT_PARALLEL

    if args.parallel is not None:
        return args.parallel
    return 1 if gpu_options(args) else DEFAULT_PARALLEL


def make_config(args: argparse.Namespace, path: Path):
    from edgeinfer.server.config import ServerConfig, model_ids

    model_id, accepted = model_ids(path, args.model, args.alias)
    draft = None
    if args.draft is not None and not args.no_speculative:
        draft = resolve_model(args.draft, reporter=RichReporter(stderr))
    sampling = SamplingParams(**sampling_options(args))
    return ServerConfig(
        model_path=path, model_id=model_id, accepted_model_ids=accepted, n_ctx=args.ctx_size,
        n_threads=args.threads, cache_type_k=args.cache_type_k, cache_type_v=args.cache_type_v,
        sampling=sampling, max_tokens_limit=args.n_predict,
        api_key=args.api_key or os.environ.get(API_KEY_ENV) or None,
        cors_origins=tuple(args.cors_origin), max_queue=args.max_queue, max_body_bytes=args.max_body,
        prompt_cache_dir=Path(args.prompt_cache_dir).expanduser() if args.prompt_cache_dir else None,
        prompt_state_min_tokens=args.prompt_cache_min, prompt_cache_max_bytes=args.prompt_cache_size,
        gpu=gpu_options(args), speculative=not args.no_speculative, parallel=parallel_slots(args),
        draft_path=draft,
    )


def main(args: argparse.Namespace) -> int:
    import uvicorn

    from edgeinfer.server.app import create_app
    from edgeinfer.server.metrics import Metrics
    from edgeinfer.server.prompt_store import PromptStateStore
    from edgeinfer.server.worker import Engine, EngineState

    verbose = bool(getattr(args, "verbose", False))
    # The slots' threads hand the GIL to the event loop's while the core decodes, and need it
    # back the moment a step ends: the default switch interval (5 ms) would let the event loop
    # keep it for a sizeable part of a step.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    path = resolve_model(args.model, reporter=RichReporter(stderr))
    config = make_config(args, path)

    def load() -> Model:
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always")
            model = Model.load(config.model_path, n_ctx=config.n_ctx, n_threads=config.n_threads,
                               cache_type_k=config.cache_type_k, cache_type_v=config.cache_type_v,
                               n_parallel=config.parallel, **(config.gpu or {}))
        for note in notes:
            stderr.print(f"note: {in_flags(note.message)}", style="yellow", soft_wrap=True)
        print_placement(model, (config.cache_type_k, config.cache_type_v))
        stderr.print(f"model {config.model_id!r} loaded: n_ctx={model.n_ctx}, {model.n_threads} threads, "
                     f"{model.kv_summary()}", style="dim", soft_wrap=True)
        slots = model.n_parallel
        stderr.print(f"{slots} parallel slot{'s' * (slots > 1)}: each request has {model.n_ctx} tokens of context "
                     f"({model.kv_bytes * slots / 2**20:.1f} MiB of KV cache in all); more requests wait in a "
                     f"queue of {config.max_queue}", style="dim", soft_wrap=True)
        return model

    def make_drafts(model: Model) -> list[DraftModel]:
        """One DraftModel per slot, over the draft model loaded once with a sequence per slot."""
        draft = Model.load(config.draft_path, n_ctx=model.n_ctx, n_threads=model.n_threads,
                           n_parallel=model.n_parallel)
        drafts = [DraftModel(draft, model, prompt_cache=cache) for cache in draft.prompt_caches]
        stderr.print(f"draft model {config.draft_path.name}: guesses for every slot, checked by the model",
                     style="dim", soft_wrap=True)
        return drafts

    def make_store(model: Model) -> PromptStateStore:
        store = PromptStateStore(model, config.prompt_cache_dir, config.prompt_state_min_tokens,
                                 config.prompt_cache_max_bytes)
        n = store.load_all()
        stderr.print(f"prompt cache: {n} saved prefix state(s) loaded from {store.folder}", style="dim",
                     soft_wrap=True)
        return store

    server: uvicorn.Server | None = None

    def on_load_failure(exc: BaseException) -> None:
        print_error(f"cannot load the model: {in_flags(exc)}")
        if server is not None:
            server.should_exit = True

    engine = Engine(load, Metrics(), config.max_queue,
                    make_prompt_store=make_store if config.prompt_cache_dir else None,
                    make_drafts=make_drafts if config.draft_path else None,
                    on_load_failure=on_load_failure)
    app = create_app(config, engine)
    warning = bind_warning(args.host, bool(config.api_key))
    if warning:
        stderr.print(f"warning: {warning}", style="bold yellow", soft_wrap=True)
    host = f"[{args.host}]" if ":" in args.host else args.host
    stderr.print(f"edgeinfer serve: http://{host}:{args.port}/v1  (model id {config.model_id!r})",
                 soft_wrap=True)
    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            # uvicorn waits for open connections before the app's shutdown runs: end the
            # generations first, so streams close with an error event instead of being cut.
            # (A thread, not this signal handler, takes the engine's lock.)
            threading.Thread(target=engine.cancel_all, daemon=True).start()
            super().handle_exit(sig, frame)

    server = Server(uvicorn.Config(app, host=args.host, port=args.port, access_log=verbose,
                                   log_level="info" if verbose else "warning", timeout_graceful_shutdown=3))
    server.run()
    return 1 if engine.state is EngineState.FAILED else 0
