"""The command line: one argparse parser with a subparser per command.

Sampling defaults are taken from `edgeinfer.sampling.SamplingParams`, so ``--help`` shows the
values the library actually uses.
"""
from __future__ import annotations

import argparse
import os
import re
from typing import Any, Callable, Sequence

from edgeinfer import __version__
from edgeinfer.catalog import default_model_name, known_names
from edgeinfer.model import KV_CACHE_TYPES
from edgeinfer.sampling import DEFAULTS, HELP, parse_option
from edgeinfer.text_check import not_utf8
from edgeinfer.server.config import (DEFAULT_KEEP_ALIVE_S, DEFAULT_MAX_LOADED, DEFAULT_PARALLEL, DEFAULT_PROMPT_CACHE_BYTES,
                                     DEFAULT_PROMPT_STATE_MIN_TOKENS, parse_keep_alive)

MODEL_HELP = ("a .gguf file, a known model name ({names}) or a Hugging Face GGUF repo (hf.co/OWNER/REPO[:QUANT]); default: {default}")


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _token_limit(text: str) -> int | None:
    """run's -n: a positive count, or -1 for none (None), as llama.cpp's -n -1."""
    value = int(text)
    if value == -1:
        return None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, or -1 for no limit, got {text}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a TCP port is 0 to 65535, got {text}")
    return value


def _byte_size(text: str) -> int:
    """A size in bytes: a number with an optional K, M or G (binary units)."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"expected a size such as 512M or 2G, got {text!r}")
    return int(float(match.group(1)) * 1024 ** " KMG".index((match.group(2) or " ").upper()))


POOLINGS = ["none", "mean", "cls", "last", "rank"]   # Model.load's pooling (llama.cpp's --pooling)


def _keep_alive(text: str) -> float | None:
    try:
        return parse_keep_alive(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or a positive integer, got {text}")
    return value


KV_TYPES = KV_CACHE_TYPES   # the types Model.load takes


def add_kv_cache_options(p: argparse.ArgumentParser) -> None:
    """--ctk/--ctv (KV cache types), for every command that loads a model."""
    p.add_argument("-ctk", "--ctk", "--cache-type-k", dest="cache_type_k", choices=KV_TYPES, default="f16",
                   help="KV cache type for K (default: %(default)s)")
    p.add_argument("-ctv", "--ctv", "--cache-type-v", dest="cache_type_v", choices=KV_TYPES, default="f16",
                   help="KV cache type for V (default: %(default)s)")


def add_gpu_options(p: argparse.ArgumentParser) -> None:
    """--gpu-layers, --device, --require-gpu (OpenCL offload; edgeinfer/gpu/placement.py)."""
    p.add_argument("-ngl", "--gpu-layers", "--n-gpu-layers", dest="gpu_layers", default=None, metavar="N",
                   help="layers on the OpenCL device: N (the last N), all, auto, or a list such as 0-5,12 "
                        "(default: none)")
    p.add_argument("--device", type=_non_negative_int, default=0, metavar="I",
                   help="the OpenCL device, by its index in `edgeinfer devices` (default: %(default)s)")
    p.add_argument("--require-gpu", action="store_true",
                   help="fail instead of running on the CPU when no OpenCL device is available")


def _sampling(name: str) -> Callable[[str], float]:
    """The argparse type of the sampling option `name`: checked against its limits, as the Python
    API, /set and the server check it too."""

    def parse(text: str) -> float:
        try:
            return parse_option(name, text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _seed(text: str) -> int | None:
    """--seed: -1 is llama.cpp's "random", kept for the people used to it."""
    return None if text.strip() == "-1" else _sampling("seed")(text)


# The SamplingParams fields the commands offer, with their flags and metavars; the default, the
# check and the help are the field's. Each value lands in the namespace under the field's name.
SAMPLING_FLAGS = {"temperature": ("--temp", "T"), "top_k": ("--top-k", "K"), "top_p": ("--top-p", "P"),
                  "min_p": ("--min-p", "P"), "repeat_penalty": ("--repeat-penalty", "R"), "seed": ("--seed", "S")}


def add_sampling_options(p: argparse.ArgumentParser) -> None:
    """--temp, --top-k, --top-p, --min-p, --repeat-penalty, --seed (from SamplingParams)."""
    for name, (flag, metavar) in SAMPLING_FLAGS.items():
        if name == "seed":
            p.add_argument(flag, dest=name, type=_seed, default=DEFAULTS.seed, metavar=metavar,
                           help=f"{HELP[name]} (default, or -1: random)")
        else:
            p.add_argument(flag, dest=name, type=_sampling(name), default=getattr(DEFAULTS, name), metavar=metavar,
                           help=f"{HELP[name]} (default: %(default)s)")


def add_speculation_option(p: argparse.ArgumentParser) -> None:
    """--no-speculative (Model.generate's speculative=False)."""
    p.add_argument("--no-speculative", action="store_true",
                   help="decode one token per step (default: guess tokens from earlier text and check "
                        "several per decode call where that pays; the output is the same)")


def add_draft_option(p: argparse.ArgumentParser) -> None:
    """--draft MODEL (Model.generate's draft=), for run, chat and serve."""
    p.add_argument("--draft", metavar="MODEL",
                   help="guess tokens with this smaller model of the same vocabulary (a .gguf file or a known "
                        "model name; same context size and threads), several checked per decode call: the "
                        "same output greedy or seeded, the same distribution otherwise (default: guess from "
                        "earlier text; --no-speculative turns both off)")


def sampling_options(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling options parsed by add_sampling_options, as SamplingParams / Model.generate
    keyword arguments."""
    return {name: getattr(args, name) for name in SAMPLING_FLAGS}


def _add_model(p: argparse.ArgumentParser) -> None:
    help_text = MODEL_HELP.format(names=", ".join(known_names()), default=default_model_name())
    p.add_argument("model", nargs="?", metavar="MODEL", help=help_text)


def _add_run(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("run", parents=[common], help="generate a continuation of a prompt",
                       description="Stream the model's continuation of a prompt to stdout; "
                                   "timings go to stderr.")
    _add_model(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("-p", "--prompt", type=_text, help="the prompt text")
    src.add_argument("-f", "--file", metavar="PATH",
                     help="read the prompt from a file ('-' = stdin)")
    src.add_argument("--chat", type=_text, metavar="TEXT",
                     help="ask TEXT as one chat turn, formatted by the model's chat template")
    p.add_argument("-s", "--system", type=_text, metavar="TEXT",
                   help="system message for --chat")
    p.add_argument("-n", "--n-predict", type=_token_limit, default=128, metavar="N",
                   help="maximum number of tokens to generate; -1 = no limit: until the end of the text, or "
                        "until the context is full unless --context-shift (default: %(default)s)")
    add_sampling_options(p)
    p.add_argument("--stop", action="append", default=[], type=_text, metavar="TEXT",
                   help="stop when this text is generated (repeatable)")
    add_speculation_option(p)
    add_draft_option(p)
    constrain = p.add_mutually_exclusive_group()
    constrain.add_argument("--json-schema", metavar="FILE",
                           help="constrain the output to JSON that validates against the JSON Schema "
                                "in FILE (compact, with bounded digits)")
    constrain.add_argument("--grammar", metavar="FILE",
                           help="constrain the output to the Lark grammar in FILE (llguidance's dialect)")
    p.add_argument("-t", "--threads", type=_positive_int, default=None, metavar="N",
                   help="CPU threads (default: physical cores)")
    p.add_argument("-c", "--ctx-size", type=_non_negative_int, default=2048, metavar="N",
                   help="context size in tokens, at most the model's trained context; 0 = the "
                        "model's (default: %(default)s)")
    add_kv_cache_options(p)
    p.add_argument("--context-shift", action="store_true",
                   help="when generation fills the context, drop the oldest half of it (after "
                        "--keep tokens) and go on, instead of stopping")
    p.add_argument("--keep", type=_non_negative_int, default=None, metavar="N",
                   help="tokens at the start kept by --context-shift (default: the BOS token)")
    p.add_argument("--no-bos", action="store_true",
                   help="do not add the BOS token (or other special tokens) to the prompt; "
                        "not with --chat, where the chat template decides")
    add_gpu_options(p)


def _add_chat(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("chat", parents=[common], help="chat with a model in the terminal",
                       description="An interactive chat (type /help in it). With stdin not a "
                                   "terminal, each line is a message and only the answers are "
                                   "printed.")
    _add_model(p)
    system = p.add_mutually_exclusive_group()
    system.add_argument("-s", "--system", type=_text, metavar="TEXT", help="system prompt")
    system.add_argument("--system-file", metavar="PATH", help="read the system prompt from a file")
    p.add_argument("-n", "--max-tokens", type=_positive_int, default=1024, metavar="N",
                   help="longest answer, in tokens (default: %(default)s)")
    add_sampling_options(p)
    p.add_argument("-t", "--threads", type=_positive_int, default=None, metavar="N",
                   help="CPU threads (default: physical cores)")
    p.add_argument("-c", "--ctx-size", type=_non_negative_int, default=4096, metavar="N",
                   help="context size in tokens, at most the model's trained context; 0 = the "
                        "model's (default: %(default)s)")
    add_kv_cache_options(p)
    p.add_argument("--single", action="store_true",
                   help="with piped input: the whole input is one message")
    p.add_argument("--no-stats", action="store_true", help="no stats line after each answer")
    p.add_argument("--hide-reasoning", action="store_true",
                   help="do not show a reasoning model's thinking (shown dimmed by default; /reasoning "
                        "switches it; piped, it goes to stderr)")
    add_speculation_option(p)
    add_draft_option(p)
    add_gpu_options(p)
    p.add_argument("--no-history", action="store_true", help="do not read or write the input history")


def _text(value: str) -> str:
    """A text argument (a prompt, a stop string, a text to embed), whose bytes must be UTF-8.
    Python decodes the command line's other bytes to lone surrogates (surrogateescape), which the
    tokenizer would call 'a lone surrogate' instead of naming the argument."""
    try:
        os.fsencode(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise argparse.ArgumentTypeError(str(not_utf8("the text", exc))) from None
    return value


def _int_list(text: str) -> list[int]:
    """'512' or '128,256' -> [512] or [128, 256] (non-negative; 0 skips that kind of test)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of integers, got {text!r}")
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return values


def _kv_type_list(text: str) -> list[str]:
    """'f16' or 'f16,q8_0' -> ['f16'] or ['f16', 'q8_0'] (each a KV cache type)."""
    values = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in values if v not in KV_TYPES]
    if not values or bad:
        raise argparse.ArgumentTypeError(f"expected KV cache types from {', '.join(KV_TYPES)}, got {text!r}")
    return values


def _add_bench(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("bench", parents=[common], help="measure prompt and generation speed (like llama-bench)",
                       description="Prompt processing (one decode of P tokens from an empty context) and "
                                   "token generation (N single-token decodes) on fixed token ids: no "
                                   "tokenizer, no sampler. Prints mean ± stddev tok/s over the repetitions.")
    _add_model(p)
    p.add_argument("-p", "--n-prompt", type=_int_list, default=[512], metavar="P[,P...]",
                   help="prompt lengths; 0 = no prompt test (default: 512)")
    p.add_argument("-n", "--n-gen", type=_int_list, default=[128], metavar="N[,N...]",
                   help="generation lengths; 0 = no generation test (default: 128)")
    p.add_argument("-t", "--threads", type=_int_list, default=[0], metavar="T[,T...]",
                   help="thread counts; 0 = physical cores (default: 0)")
    p.add_argument("-r", "--repetitions", type=_positive_int, default=5, metavar="R",
                   help="timed runs per test, after one warm-up run (default: %(default)s)")
    p.add_argument("-c", "--ctx-size", type=_positive_int, default=None, metavar="N",
                   help="context size (default: the longest test's length)")
    p.add_argument("-b", "--batch-size", type=_positive_int, default=512, metavar="N",
                   help="tokens per forward chunk (default: %(default)s)")
    p.add_argument("-d", "--n-depth", type=_int_list, default=[0], metavar="D[,D...]",
                   help="tokens already in the context when each test starts (default: 0)")
    p.add_argument("-np", "--parallel", type=_int_list, default=[1], metavar="S[,S...]",
                   help="also run the generation tests with S sequences at once, one decode call per "
                        "step for all (parallel requests; like llama-batched-bench -npl) (default: 1)")
    p.add_argument("-ctk", "--ctk", "--cache-type-k", dest="cache_type_k", type=_kv_type_list, default=["f16"],
                   metavar="T[,T...]", help=f"KV cache types for K ({', '.join(KV_TYPES)}; default: f16)")
    p.add_argument("-ctv", "--ctv", "--cache-type-v", dest="cache_type_v", type=_kv_type_list, default=["f16"],
                   metavar="T[,T...]", help=f"KV cache types for V (default: f16)")
    add_gpu_options(p)
    p.add_argument("--json", action="store_true", help="print the results as JSON")


def _add_serve(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("serve", parents=[common], help="serve a model over an OpenAI-compatible HTTP API",
                       description="A local OpenAI-compatible server (/v1/chat/completions, /v1/completions, "
                                   "/v1/models, /health, /metrics, /tokenize, /detokenize). Of one MODEL, or without "
                                   "one of every model in the models folder and every known one, each loaded when a "
                                   "request first names it. --parallel requests a model run at once, sharing each "
                                   "decode step, the rest queued in order.")
    p.add_argument("model", nargs="?", metavar="MODEL",
                   help="a GGUF file or a known model name; without one, every model of the models folder "
                        f"and the known ones ({', '.join(known_names())}) by name, loaded on first use")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind; anything but loopback exposes the model to the network "
                        "(default: %(default)s)")
    p.add_argument("--port", type=_port, default=8080, help="port to bind; 0 = any free one (default: %(default)s)")
    p.add_argument("--alias", metavar="NAME", help="model id to report and accept (default: the model's name)")
    p.add_argument("--api-key", metavar="KEY",
                   help="require this key as 'Authorization: Bearer KEY' or 'X-Api-Key: KEY' "
                        "(/health stays open; default: $EDGEINFER_API_KEY, else no key)")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="allow browser pages from ORIGIN (repeatable; '*' = any); default: CORS off")
    p.add_argument("-c", "--ctx-size", type=_non_negative_int, default=2048, metavar="N",
                   help="context size in tokens, at most the model's trained context; 0 = the "
                        "model's (default: %(default)s)")
    p.add_argument("-t", "--threads", type=_positive_int, default=None, metavar="N",
                   help="CPU threads (default: physical cores)")
    add_kv_cache_options(p)
    p.add_argument("-n", "--n-predict", type=_positive_int, default=None, metavar="N",
                   help="tokens per request at most; larger max_tokens are clamped (default: the context)")
    add_sampling_options(p)
    p.add_argument("-np", "--parallel", type=_positive_int, default=None, metavar="N",
                   help=f"requests run at once, each with a context of --ctx-size tokens of its own (the KV "
                        f"cache's memory grows N times) (default: {DEFAULT_PARALLEL}; 1 with --gpu-layers)")
    p.add_argument("--max-queue", type=_positive_int, default=32, metavar="N",
                   help="requests that may wait for a free slot; more get 503 (default: %(default)s)")
    p.add_argument("--max-body", type=_positive_int, default=8 * 1024 * 1024, metavar="BYTES",
                   help="largest request body accepted (default: %(default)s)")
    p.add_argument("--prompt-cache-dir", metavar="DIR",
                   help="keep the KV state of long shared prompt prefixes (e.g. a system prompt) in DIR "
                        "across restarts")
    p.add_argument("--prompt-cache-min", type=_positive_int, default=DEFAULT_PROMPT_STATE_MIN_TOKENS, metavar="N",
                   help="shortest prefix saved to --prompt-cache-dir (default: %(default)s tokens)")
    p.add_argument("--prompt-cache-size", type=_byte_size, default=DEFAULT_PROMPT_CACHE_BYTES, metavar="SIZE",
                   help="most bytes --prompt-cache-dir may hold, e.g. 512M or 2G; least recently used out "
                        "first (default: 1G)")
    p.add_argument("--embeddings", action="store_true",
                   help="let generative models answer /v1/embeddings with their pooled hidden states "
                        "(embedding models always do)")
    p.add_argument("--pooling", choices=POOLINGS, default=None,
                   help="how token states become one embedding (default: the model file's; a generative "
                        "model's file names none: give mean, last or cls with --embeddings)")
    p.add_argument("--max-loaded", type=_positive_int, default=DEFAULT_MAX_LOADED, metavar="N",
                   help="without MODEL: models loaded at once, least recently used unloaded first "
                        "(default: %(default)s)")
    p.add_argument("--keep-alive", type=_keep_alive, default=DEFAULT_KEEP_ALIVE_S, metavar="DURATION",
                   help="without MODEL: how long an idle model stays loaded, e.g. 30s, 5m, 1h; -1 = until "
                        "room is needed (default: 5m)")
    p.add_argument("--memory-budget", type=_byte_size, default=None, metavar="SIZE",
                   help="without MODEL: most memory the loaded models may take (weights and KV caches), e.g. "
                        "8G (default: 3/4 of physical memory)")
    add_speculation_option(p)
    add_draft_option(p)
    add_gpu_options(p)


def _add_output(p: argparse.ArgumentParser) -> None:
    """OUT.gguf and --force, for the commands that write a model file (edgeinfer.output_file)."""
    p.add_argument("output", metavar="OUT.gguf", help="the file to write")
    p.add_argument("--force", action="store_true", help="overwrite OUT.gguf if it exists")


def _add_quantize(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from edgeinfer.quantize.plan import PRESETS, WRITABLE

    types = ", ".join(t.name for t in WRITABLE)
    p = sub.add_parser("quantize", parents=[common],
                       help="write a quantized copy of a GGUF model (like llama-quantize)",
                       description="Convert every tensor of IN to the types TYPE chooses (llama.cpp's presets: "
                                   "the _S/_M/_L mixes keep the output and some attention-V / FFN-down tensors "
                                   "at more bits) and write OUT. OUT appears only once complete.")
    p.add_argument("input", metavar="IN.gguf", help="the model to convert (best: F32, F16 or BF16 weights)")
    _add_output(p)
    p.add_argument("type", metavar="TYPE", type=str.upper, choices=list(PRESETS),
                   help="one of " + ", ".join(PRESETS))
    p.add_argument("-t", "--threads", type=_positive_int, default=None, metavar="N",
                   help="threads (default: all CPUs)")
    p.add_argument("--pure", action="store_true",
                   help="the preset's type for every quantizable tensor, no per-tensor mix")
    p.add_argument("--output-tensor-type", metavar="T", help=f"type of output.weight ({types})")
    p.add_argument("--token-embedding-type", metavar="T", help="type of token_embd.weight")
    p.add_argument("--tensor-type", action="append", default=[], metavar="REGEX=TYPE",
                   help="type of the tensors whose name matches REGEX (repeatable; the first match wins)")
    p.add_argument("--allow-requantize", action="store_true",
                   help="accept an input that is already quantized (quality suffers; prefer the original)")
    p.add_argument("--imatrix", metavar="FILE",
                   help="importance matrix for the quantizers (from `edgeinfer imatrix` or llama-imatrix, GGUF "
                        "or .dat); needed by Q2_K_S and the 1-3-bit i-quants, better results for all")


def _add_convert(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from edgeinfer.quantize.plan import PRESETS

    p = sub.add_parser("convert", parents=[common],
                       help="convert a Hugging Face checkpoint folder to GGUF (like convert_hf_to_gguf.py)",
                       description="Read the safetensors weights, config and tokenizer of HF_DIR and write OUT.gguf "
                                   "with llama.cpp's metadata and tensor names, one tensor at a time. OUT appears "
                                   "only once complete. Architectures: Llama (Llama 2/3, Mistral, SmolLM, "
                                   "TinyLlama), Qwen 2/2.5/3, Phi-3, Gemma 3.")
    p.add_argument("input", metavar="HF_DIR", help="folder with config.json, *.safetensors and the tokenizer files")
    _add_output(p)
    p.add_argument("--outtype", type=str.lower, default="f16", choices=[t.lower() for t in PRESETS],
                   metavar="TYPE", help="tensor type: f32, f16 (default), bf16, or a quantize preset "
                                        "(q8_0, q4_k_m, ...: " + ", ".join(t.lower() for t in PRESETS) + ")")
    p.add_argument("-t", "--threads", type=_positive_int, default=None, metavar="N",
                   help="threads for quantized output types (default: all CPUs)")


def _add_text_chunks(p: argparse.ArgumentParser, text: str, chunks: str) -> None:
    """MODEL, -f TEXT, -c, --chunks and -t: the commands that run a model over a text in chunks
    (perplexity, imatrix)."""
    _add_model(p)
    p.add_argument("-f", "--file", required=True, metavar="PATH", help=f"{text} ('-' = stdin)")
    p.add_argument("-c", "--ctx-size", type=_positive_int, default=512, metavar="N",
                   help="tokens per chunk (default: %(default)s)")
    p.add_argument("--chunks", type=_positive_int, default=None, metavar="N", help=f"{chunks} (default: all)")
    p.add_argument("-t", "--threads", type=_positive_int, default=None, metavar="N",
                   help="CPU threads (default: physical cores)")


def _add_perplexity(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("perplexity", parents=[common],
                       help="measure a model's perplexity on a text (like llama-perplexity)",
                       description="Cut the text into chunks of -c tokens, evaluate each from an empty context and "
                                   "score the second half of each chunk, as llama-perplexity does. Prints the running "
                                   "estimate per chunk and the final PPL ± its standard error.")
    _add_text_chunks(p, "the text to score", "score only the first N chunks")
    p.add_argument("-b", "--batch-size", type=_positive_int, default=None, metavar="N",
                   help="tokens per forward call (default: the chunk size)")
    add_kv_cache_options(p)
    p.add_argument("--kl-divergence-base", metavar="FILE",
                   help="alone: save this model's top logits per scored token to FILE; with --kl-divergence: "
                        "the base file to compare with (llama-perplexity's usage)")
    p.add_argument("--kl-divergence", action="store_true",
                   help="compare with the logits saved in FILE (--kl-divergence-base or --kl-file): "
                        "mean and 99th-percentile KL divergence, same-top-token %%")
    p.add_argument("--kl-file", metavar="FILE", help="the base file read by --kl-divergence (same as "
                                                     "--kl-divergence-base FILE --kl-divergence)")
    p.add_argument("--kl-top-k", type=_positive_int, default=1024, metavar="K",
                   help="logits kept per token in the base file; the rest of the vocabulary is one bucket, "
                        "so the KLD is a lower bound, ~2%% low at the default (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _add_imatrix(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("imatrix", parents=[common],
                       help="collect an importance matrix for quantize --imatrix (like llama-imatrix)",
                       description="Run the model over a calibration text in chunks of -c tokens (each from an "
                                   "empty context) and save, for every weight matrix, the sum of each input "
                                   "column's square: what quantize --imatrix weighs rounding errors by. The file "
                                   "is llama.cpp's format (GGUF, or its legacy .dat), so either tool reads it.")
    _add_text_chunks(p, "the calibration text", "use only the first N chunks")
    p.add_argument("-o", "--output", default="imatrix.gguf", metavar="FILE",
                   help="the file to write (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    p.add_argument("--output-format", choices=["gguf", "dat"], default=None,
                   help="gguf (llama-imatrix's default) or dat (its legacy format); default: from the "
                        "file name, gguf unless it ends in .dat")
    p.add_argument("--process-output", action="store_true",
                   help="also collect the output projection's input (llama-imatrix --process-output)")


def _add_embedding_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--ctx-size", type=_non_negative_int, default=0, metavar="N",
                   help="context size: the longest input, in tokens; 0 = the model's (default: %(default)s)")
    p.add_argument("-t", "--threads", type=_positive_int, default=None, metavar="N",
                   help="CPU threads (default: physical cores)")
    p.add_argument("--truncate", action="store_true",
                   help="cut inputs longer than the context instead of refusing them")


def _add_embed(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("embed", parents=[common], help="embed texts (one JSON line per text)",
                       description="Print each text's embedding as a JSON line {\"index\", \"embedding\"}: texts "
                                   "from the arguments, else one per line of -f FILE (or stdin). An embedding model "
                                   "(bge, MiniLM, nomic, Qwen3-Embedding, ...), or a generative model's pooled "
                                   "hidden states.")
    p.add_argument("model", metavar="MODEL", help="a GGUF file or a known model name")
    p.add_argument("texts", nargs="*", type=_text, metavar="TEXT", help="texts to embed")
    p.set_defaults(trailing_positionals="texts")
    p.add_argument("-f", "--file", metavar="PATH", help="one text per line ('-' = stdin)")
    p.add_argument("--pooling", choices=POOLINGS, default=None,
                   help="how token states become one vector (default: the model file's)")
    p.add_argument("--no-normalize", action="store_true", help="print the vectors without L2 normalization")
    _add_embedding_model_options(p)


def _add_rerank(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("rerank", parents=[common], help="score documents against a query (a reranker model)",
                       description="Print one JSON line {\"index\", \"score\", \"document\"} per document, best "
                                   "first, as scored by a cross-encoder reranker (bge-reranker, ...): documents from "
                                   "the arguments, else one per line of -f FILE (or stdin).")
    p.add_argument("model", metavar="MODEL", help="a GGUF file or a known model name")
    p.add_argument("query", type=_text, metavar="QUERY", help="the query")
    p.add_argument("documents", nargs="*", type=_text, metavar="DOC", help="documents to score")
    p.set_defaults(trailing_positionals="documents")
    p.add_argument("-f", "--file", metavar="PATH", help="one document per line ('-' = stdin)")
    p.add_argument("--top-n", type=_positive_int, default=None, metavar="N", help="print the best N only")
    _add_embedding_model_options(p)


def parse_command_line(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`parser`'s arguments. A command whose last positional takes any number of values (embed's
    TEXT, rerank's DOC) takes them after its options too (`embed MODEL --pooling mean "a text"`):
    argparse alone matches that positional, empty, before the options and calls the text
    unrecognized."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        trailing = getattr(args, "trailing_positionals", None)
        if trailing is None or any(e.startswith("-") and e != "-" for e in extras):
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
        try:
            getattr(args, trailing).extend(_text(e) for e in extras)
        except argparse.ArgumentTypeError as exc:
            parser.error(str(exc))
    return args


def build_parser() -> argparse.ArgumentParser:
    """The ``edgeinfer`` argument parser."""
    # Accept --verbose both before and after the command; SUPPRESS keeps a subcommand's default
    # from overwriting a top-level --verbose.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks on errors (also: EDGEINFER_DEBUG=1)")

    parser = argparse.ArgumentParser(
        prog="edgeinfer", parents=[common],
        description="Local LLM inference for GGUF models.",
    )
    parser.add_argument("--version", action="version", version=f"edgeinfer {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    _add_run(sub, common)
    _add_chat(sub, common)

    p = sub.add_parser("info", parents=[common], help="show what is inside a model file")
    _add_model(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_gpu_options(p)  # with --gpu-layers: print the placement plan (nothing is loaded)
    p.add_argument("-c", "--ctx-size", type=_positive_int, default=4096, metavar="N",
                   help="context size the plan's KV cache is sized for (default: %(default)s)")
    add_kv_cache_options(p)

    _add_bench(sub, common)

    p = sub.add_parser("pull", parents=[common], help="download known models or Hugging Face GGUF files")
    p.add_argument("names", nargs="*", metavar="NAME",
                   help=f"models to fetch: {', '.join(known_names())}, or hf.co/OWNER/REPO[:QUANT] "
                        f"(default quant Q4_K_M) (default: {default_model_name()})")
    p.add_argument("--all", action="store_true", help="fetch every known model")
    p.add_argument("--force", action="store_true", help="fetch again even if present")

    sub.add_parser("models", parents=[common], help="list known models and whether they are pulled")
    _add_serve(sub, common)
    _add_quantize(sub, common)
    _add_convert(sub, common)
    _add_perplexity(sub, common)
    _add_imatrix(sub, common)
    _add_embed(sub, common)
    _add_rerank(sub, common)

    p = sub.add_parser("devices", parents=[common], help="list OpenCL platforms and devices")
    p.add_argument("--json", action="store_true", help="print the devices as JSON")
    return parser
