#!/usr/bin/env python3
"""Is the fast float order as good as llama.cpp's? KL divergence of a quantized file's next-token
distributions from its F32 weights' on eval.txt, for edgeinfer in llama.cpp's order (the same
logits as llama.cpp on this ISA) and in the fast order, on the same tokens, paired per token; and
llama-perplexity's own figure on the same file and chunks when its path is given.

    python scripts/kl_float_order.py F32.gguf QUANT.gguf [QUANT.gguf ...] [--chunks 8] [-c 512] [-t 2]
        [-b 1] [--llama-perplexity .../llama-perplexity] [--json]

edgeinfer's KLD keeps the base model's top 1024 logits per token (edgeinfer.kld: a lower bound a
few percent under the full-vocabulary figure); both orders are measured against the same base
file, so their difference is exact for that bound. llama-perplexity keeps every logit.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edgeinfer import _core  # noqa: E402
from edgeinfer.kld import BaseRecorder, Comparer  # noqa: E402
from edgeinfer.machine import cpu_name  # noqa: E402
from edgeinfer.model import Model  # noqa: E402
from edgeinfer.perplexity import perplexity  # noqa: E402

EVAL_TEXT = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "eval.txt"


def score(path: Path, text: str, args, hook, exact: bool, n_batch: int):
    model = Model.load(path, n_ctx=args.ctx_size, n_batch=n_batch, n_threads=args.threads, exact=exact)
    result = perplexity(model, text, n_ctx=args.ctx_size, n_chunks=args.chunks, on_scored=hook)
    return model, result


def llama_kld(binary: str, base: Path, quant: Path, text_file: Path, args, workdir: Path) -> float:
    """Mean KLD as llama-perplexity reports it (its base file made once per F32 model)."""
    common = ["-f", str(text_file), "-c", str(args.ctx_size), "-b", str(args.ctx_size), "-t", str(args.threads),
              "--chunks", str(args.chunks)]
    kld_file = workdir / f"{base.stem}.llama.kld"
    if not kld_file.exists():
        subprocess.run([binary, "-m", str(base), *common, "--kl-divergence-base", str(kld_file)],
                       check=True, capture_output=True)
    out = subprocess.run([binary, "-m", str(quant), *common, "--kl-divergence-base", str(kld_file), "--kl-divergence"],
                         check=True, capture_output=True, text=True)
    m = re.search(r"Mean\s+KLD:\s+([0-9.eE+-]+)", out.stdout + out.stderr)
    if not m:
        sys.exit(f"[kl_float_order] no 'Mean KLD' in llama-perplexity's output for {quant}")
    return float(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", type=Path, help="the F32 file")
    ap.add_argument("quants", type=Path, nargs="+", help="quantized files of the same weights")
    ap.add_argument("-f", "--file", type=Path, default=EVAL_TEXT)
    ap.add_argument("-c", "--ctx-size", type=int, default=512)
    ap.add_argument("-b", "--batch-size", type=int, default=0,
                    help="tokens per decode call (default: the chunk size; 1 scores the decode path: one-token "
                         "matmuls and the decode attention)")
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--llama-perplexity", metavar="PATH", help="also llama.cpp's figure (its llama-perplexity)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    text = args.file.read_text(encoding="utf-8")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        recorder = BaseRecorder()
        _, base_result = score(args.base, text, args, recorder, exact=True, n_batch=args.ctx_size)
        base_file = workdir / "base.npz"
        recorder.save(base_file, {"model": str(args.base), "n_ctx": base_result.n_ctx,
                                  "n_chunks": base_result.n_chunks, "ppl": base_result.ppl})
        for quant in args.quants:
            row = {"file": quant.name}
            klds = {}
            for name, exact in (("llama_cpp_order", True), ("fast_order", False)):
                hook = Comparer(base_file)
                model, result = score(quant, text, args, hook, exact, args.batch_size or args.ctx_size)
                kld = hook.result()
                klds[name] = kld.klds
                row[name] = {"mean_kld": kld.mean_kld, "median_kld": kld.median_kld, "kld_99": kld.kld_99,
                             "max_kld": kld.max_kld, "same_top_pct": kld.same_top_pct,
                             "ppl": result.ppl, "float_order": model._core.float_order}
            diff = klds["fast_order"] - klds["llama_cpp_order"]
            # KL per token is heavy-tailed: the few tokens that move the mean most, and the mean
            # without them, say whether a difference is broad or a handful of flipped tokens.
            worst = np.argsort(-np.abs(diff))[:5]
            kept = np.ones(len(diff), bool)
            kept[worst] = False
            row["fast_minus_llama_cpp"] = {"mean": float(diff.mean()),
                                           "stderr": float(diff.std(ddof=1) / math.sqrt(len(diff))),
                                           "median": float(np.median(diff)),
                                           "largest": [{"token": int(i), "diff": float(diff[i])} for i in worst],
                                           "mean_without_largest": float(diff[kept].mean()),
                                           "n_tokens": len(diff)}
            if args.llama_perplexity:
                row["llama_perplexity_mean_kld"] = llama_kld(args.llama_perplexity, args.base, quant, args.file, args,
                                                             workdir)
            rows.append(row)
    report = {"cpu": cpu_name(), "isa": _core.isa(), "n_ctx": args.ctx_size, "n_batch": args.batch_size or args.ctx_size,
              "chunks": args.chunks, "rows": rows}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"CPU: {report['cpu']} ({report['isa']}), {args.chunks} chunks of {args.ctx_size} in calls of "
          f"{report['n_batch']}, base {args.base.name}")
    for r in rows:
        a, b, d = r["llama_cpp_order"], r["fast_order"], r["fast_minus_llama_cpp"]
        largest = ", ".join(f"{x['diff']:+.3f}" for x in d["largest"])
        print(f"{r['file']}: mean KLD llama.cpp order {a['mean_kld']:.6f}, fast order {b['mean_kld']:.6f} "
              f"(fast - llama.cpp {d['mean']:+.2e} +- {d['stderr']:.1e} over {d['n_tokens']} tokens, median "
              f"{d['median']:+.1e}, {d['mean_without_largest']:+.2e} without the 5 largest: "
              f"{largest}); "
              f"99th pct {a['kld_99']:.5f} / {b['kld_99']:.5f}; same top token {a['same_top_pct']:.2f} / "
              f"{b['same_top_pct']:.2f} %; ppl {a['ppl']:.4f} / {b['ppl']:.4f}"
              + (f"; llama-perplexity mean KLD {r['llama_perplexity_mean_kld']:.6f}" if "llama_perplexity_mean_kld" in r
                 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
