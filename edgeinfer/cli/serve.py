"""``edgeinfer serve``: the OpenAI-compatible HTTP server (edgeinfer.server) on uvicorn.

The server listens first (before a model is resolved: edgeinfer/cli/listen.py), then loads the
model on its engine thread; /health answers 503 until the model is ready, then 200. A model that
fails to load stops the server (exit 1).
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
from edgeinfer.cli.listen import bind_sockets, display_address
from edgeinfer.cli.output import print_error, stderr
from edgeinfer.cli.pull import RichReporter
from edgeinfer.cli.run import gpu_options, print_placement
from edgeinfer.cli.wording import in_flags
from edgeinfer.draft_model import DraftModel
from edgeinfer.model import Model
from edgeinfer.catalog import default_model_name
from edgeinfer.paths import models_dir
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


def make_config(args: argparse.Namespace):
    from edgeinfer.server.config import ServerConfig

    draft = None
    if args.draft is not None and not args.no_speculative:
        draft = resolve_model(args.draft, reporter=RichReporter(stderr))
    sampling = SamplingParams(**sampling_options(args))
    return ServerConfig(
        n_ctx=args.ctx_size,
        n_threads=args.threads, cache_type_k=args.cache_type_k, cache_type_v=args.cache_type_v,
        sampling=sampling, max_tokens_limit=args.n_predict,
        api_key=args.api_key or os.environ.get(API_KEY_ENV) or None,
        cors_origins=tuple(args.cors_origin), max_queue=args.max_queue, max_body_bytes=args.max_body,
        prompt_cache_dir=Path(args.prompt_cache_dir).expanduser() if args.prompt_cache_dir else None,
        prompt_state_min_tokens=args.prompt_cache_min, prompt_cache_max_bytes=args.prompt_cache_size,
        gpu=gpu_options(args), speculative=not args.no_speculative, parallel=parallel_slots(args),
        draft_path=draft, embeddings=args.embeddings, pooling=args.pooling,
    )


def check_many_models_args(args: argparse.Namespace) -> None:
    """Options that name one model's settings need a model to serve."""
    for flag, value in (("--alias", args.alias), ("--draft", args.draft)):
        if value is not None:
            raise ValueError(f"{flag} needs a model (edgeinfer serve MODEL {flag} ...); without one the server "
                             f"serves every model of the models folder under its own name")


def main(args: argparse.Namespace) -> int:
    import uvicorn

    from edgeinfer.server.app import create_app
    from edgeinfer.server.metrics import Metrics
    from edgeinfer.server.model_pool import ModelPool, default_memory_budget
    from edgeinfer.server.prompt_store import PromptStateStore
    from edgeinfer.server.served_models import ServedModel, folder_models, memory_estimate, single_model
    from edgeinfer.server.worker import Engine, EngineState

    verbose = bool(getattr(args, "verbose", False))
    # The slots' threads hand the GIL to the event loop's while the core decodes, and need it
    # back the moment a step ends: the default switch interval (5 ms) would let the event loop
    # keep it for a sizeable part of a step.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    many = args.model is None
    if many:
        check_many_models_args(args)
    # Before a model is pulled or loaded: an address in use or not of this machine fails at once.
    sockets = bind_sockets(args.host, args.port)
    port = sockets[0].getsockname()[1]   # --port 0: the one the system chose
    config = make_config(args)
    metrics = Metrics()

    def load(served: ServedModel) -> Model:
        # A known model not pulled yet is pulled now: its requests wait, as for any loading model.
        path = served.path if served.entry is None else resolve_model(served.entry.name, reporter=RichReporter(stderr))
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always")
            model = Model.load(path, n_ctx=config.n_ctx, n_threads=config.n_threads,
                               cache_type_k=config.cache_type_k, cache_type_v=config.cache_type_v,
                               n_parallel=config.parallel, **(config.gpu or {}),
                               embeddings=config.embeddings, pooling=config.pooling)
        for note in notes:
            stderr.print(f"note: {in_flags(note.message)}", style="yellow", soft_wrap=True)
        print_placement(model, (config.cache_type_k, config.cache_type_v))
        stderr.print(f"model {served.model_id!r} loaded: n_ctx={model.n_ctx}, {model.n_threads} threads, "
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

    def make_engine(served: ServedModel) -> Engine:
        # A model that fails to load stops a single-model server; a server of many reports it to
        # the request and goes on.
        return Engine(lambda: load(served), metrics, config.max_queue,
                      make_prompt_store=make_store if config.prompt_cache_dir else None,
                      make_drafts=make_drafts if config.draft_path else None,
                      on_load_failure=None if many else on_load_failure)

    if many:
        budget = args.memory_budget if args.memory_budget is not None else default_memory_budget()
        pool = ModelPool(folder_models, make_engine,
                         lambda m: memory_estimate(m, config.n_ctx, config.parallel, config.cache_type_k),
                         metrics, max_loaded=args.max_loaded, memory_budget=budget, keep_alive=args.keep_alive,
                         default_model=default_model_name())
        what = (f"every model of {models_dir()} and the known ones, loaded on first use (at most {args.max_loaded} "
                f"at once" + (f", {budget / 2**30:.1f} GiB" if budget else "") + ")")
    else:
        served = single_model(resolve_model(args.model, reporter=RichReporter(stderr)), args.model, args.alias)
        pool = ModelPool.of_one(served, make_engine(served))
        what = f"model id {served.model_id!r}"
    app = create_app(config, pool)
    warning = bind_warning(args.host, bool(config.api_key))
    if warning:
        stderr.print(f"warning: {warning}", style="bold yellow", soft_wrap=True)
    stderr.print(f"edgeinfer serve: http://{display_address(args.host, port)}/v1  ({what})", soft_wrap=True)

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            # uvicorn waits for open connections before the app's shutdown runs: end the
            # generations first, so streams close with an error event instead of being cut.
            # (A thread, not this signal handler, takes the engines' locks.)
            threading.Thread(target=pool.cancel_all, daemon=True).start()
            super().handle_exit(sig, frame)

    server = Server(uvicorn.Config(app, host=args.host, port=port, access_log=verbose,
                                   log_level="info" if verbose else "warning", timeout_graceful_shutdown=3))
    server.run(sockets=sockets)
    return 1 if pool.single is not None and pool.single.engine.state is EngineState.FAILED else 0
