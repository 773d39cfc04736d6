"""``edgeinfer perplexity MODEL -f TEXT``: perplexity as llama-perplexity computes it (see
edgeinfer.perplexity), with a running estimate per chunk; optionally the KL divergence from a base
model's saved logits (edgeinfer.kld)."""
from __future__ import annotations

import argparse
import json
import time

from edgeinfer.cli.files import check_writable_output, read_text_file
from edgeinfer.cli.output import stderr, stdout, warnings_on_stderr
from edgeinfer.cli.pull import RichReporter
from edgeinfer.errors import EdgeInferError
from edgeinfer.kld import BaseRecorder, Comparer
from edgeinfer.model import Model
from edgeinfer.perplexity import check_chunk_size, perplexity
from edgeinfer.pull import resolve_model


def main(args: argparse.Namespace) -> int:
    kl_file = args.kl_file or (args.kl_divergence_base if args.kl_divergence else None)
    if args.kl_divergence and not kl_file:
        raise EdgeInferError("--kl-divergence needs the base file: --kl-divergence-base FILE (or --kl-file FILE)")
    check_chunk_size(args.ctx_size)
    text = read_text_file(args.file)
    path = resolve_model(args.model, reporter=RichReporter(stderr))
    recording = bool(args.kl_divergence_base) and not args.kl_divergence
    if recording:   # refused now, not after the whole text is scored (llama-perplexity overwrites a base too)
        check_writable_output(args.kl_divergence_base, inputs=[path, args.file], force=True)
    with warnings_on_stderr():
        model = Model.load(path, n_ctx=args.ctx_size, n_threads=args.threads,
                           n_batch=args.batch_size or args.ctx_size, cache_type_k=args.cache_type_k,
                           cache_type_v=args.cache_type_v)
    hook = None
    if args.kl_divergence:
        hook = Comparer(kl_file)
    elif recording:
        hook = BaseRecorder(args.kl_top_k)

    start = time.perf_counter()

    def on_chunk(i: int, n: int, ppl: float) -> None:
        # llama-perplexity's running line: [1]12.3456,[2]...
        stderr.print(f"[{i + 1}]{ppl:.4f}", end="," if i + 1 < n else "\n", highlight=False, soft_wrap=True)

    result = perplexity(model, text, n_ctx=args.ctx_size, n_chunks=args.chunks, on_chunk=on_chunk, on_scored=hook)
    seconds = time.perf_counter() - start
    out: dict = {"model": str(path), "ppl": result.ppl, "ppl_stderr": result.stderr, "n_chunks": result.n_chunks,
                 "n_ctx": result.n_ctx, "n_scored": result.n_scored, "seconds": round(seconds, 2)}
    if isinstance(hook, BaseRecorder):
        hook.save(args.kl_divergence_base, {"model": str(path), "n_ctx": result.n_ctx, "n_chunks": result.n_chunks,
                                            "ppl": result.ppl, "ppl_stderr": result.stderr})
        out["kl_divergence_base"] = args.kl_divergence_base
    kld = hook.result() if isinstance(hook, Comparer) else None
    if kld is not None:
        out["kld"] = kld.to_dict()
        out["ppl_base"] = hook.meta.get("ppl")
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    stdout.print(f"Final estimate: PPL = {result.ppl:.4f} +/- {result.stderr:.5f}  "
                 f"({result.n_chunks} chunks of {result.n_ctx}, {result.n_scored} tokens scored, {seconds:.1f} s)",
                 highlight=False, soft_wrap=True)
    if isinstance(hook, BaseRecorder):
        stdout.print(f"saved the top-{hook.k} logits of {result.n_scored} tokens to {args.kl_divergence_base}",
                     highlight=False, soft_wrap=True)
    if kld is not None:
        base_ppl = hook.meta.get("ppl")
        if base_ppl:
            stdout.print(f"PPL(Q)/PPL(base): {result.ppl / base_ppl:.4f}  (base {base_ppl:.4f})", highlight=False)
        stdout.print(f"Mean KLD: {kld.mean_kld:.6f} +/- {kld.mean_kld_stderr:.6f}", highlight=False)
        stdout.print(f"Median KLD: {kld.median_kld:.6f}   99.0% KLD: {kld.kld_99:.6f}   Max KLD: {kld.max_kld:.6f}",
                     highlight=False)
        stdout.print(f"Same top token: {kld.same_top_pct:.3f} +/- {kld.same_top_stderr:.3f} %", highlight=False)
        stdout.print(f"(KLD over the base's top-{hook.meta['k']} tokens plus one bucket for the rest: a lower "
                     f"bound; mean base mass outside the top {hook.meta['k']}: {kld.mean_tail_mass:.2e})",
                     highlight=False, soft_wrap=True)
    return 0
