"""The server's settings, made once from the command line and passed down."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from edgeinfer.catalog import load_manifest
from edgeinfer.sampling import DEFAULTS, SamplingParams

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_MAX_QUEUE = 32                 # requests waiting for the engine; more get 503
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_PROMPT_STATE_MIN_TOKENS = 64   # shared prefixes shorter than this are not saved
DEFAULT_PROMPT_CACHE_BYTES = 1 << 30   # --prompt-cache-dir's size at most
# Requests run at once. A desktop's apps send a few at a time (a chat's answer, its title and
# tags; an editor's completions beside a chat), and a decode step of a few rows costs far less
# than as many steps (docs/PERFORMANCE.md); llama-server's default is 4 slots too.
DEFAULT_PARALLEL = 4


@dataclass(frozen=True)
class ServerConfig:
    model_path: Path
    model_id: str                                   # the id /v1/models reports
    accepted_model_ids: frozenset[str]              # ids a request's "model" may name
    n_ctx: int = 2048
    n_threads: int | None = None
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    sampling: SamplingParams = DEFAULTS             # defaults for fields a request leaves out
    max_tokens_limit: int | None = None             # -n: tokens per request at most (None = context)
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    max_queue: int = DEFAULT_MAX_QUEUE
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    prompt_cache_dir: Path | None = None
    prompt_state_min_tokens: int = DEFAULT_PROMPT_STATE_MIN_TOKENS
    prompt_cache_max_bytes: int = DEFAULT_PROMPT_CACHE_BYTES
    gpu: dict | None = None                         # Model.load's gpu_layers / device / require_gpu
    speculative: bool = True                        # Model.generate's speculative (prompt lookup)
    parallel: int = 1                               # slots: requests run at once (Model.load's n_parallel)
    draft_path: Path | None = None                  # --draft: a smaller model of the same vocabulary guesses


def model_ids(path: Path, requested: str | None, alias: str | None) -> tuple[str, frozenset[str]]:
    """The model id to report and every id a request may use for this model: the alias, the
    name it was asked for, its manifest name and aliases, the file name and its stem."""
    names = {path.name, path.stem}
    entry_name = None
    for entry in load_manifest().values():
        if entry.filename == path.name:
            entry_name = entry.name
            names.update({entry.name, *entry.aliases})
    if requested:
        names.add(requested)
    model_id = alias or entry_name or path.stem
    names.add(model_id)
    return model_id, frozenset(names)


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
