"""The server's settings, made once from the command line and passed down."""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

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
# A server of many models (edgeinfer serve without MODEL) keeps them as Ollama does.
DEFAULT_MAX_LOADED = 3          # Ollama's default for a machine without a GPU
DEFAULT_KEEP_ALIVE_S = 300.0    # Ollama's five minutes
UNITS_S = {"": 1.0, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_keep_alive(value: str | int | float | None) -> float | None:
    """Seconds a model stays loaded once idle, in Ollama's spellings: a number of seconds or a
    duration ("5m", "1h30m", "500ms"); negative = forever (None); 0 = unload at once."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return None if value < 0 else float(value)
    text = str(value).strip()
    if re.fullmatch(r"-\d+(\.\d+)?[a-z]*", text):
        return None
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|)", text)
    if not text or "".join(a + b for a, b in parts) != text:
        raise ValueError(f"not a duration: {value!r} (e.g. 30s, 5m, 1h, -1 = forever, 0 = unload at once)")
    return sum(float(number) * UNITS_S[unit] for number, unit in parts)


@dataclass(frozen=True)
class ServerConfig:
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
    embeddings: bool = False                        # --embeddings: generative models embed too
    pooling: str | None = None                      # --pooling: overrides the model file's


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
