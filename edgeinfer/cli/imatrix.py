"""``edgeinfer imatrix MODEL -f TEXT -o FILE``: collect an importance matrix (edgeinfer.imatrix) and
save it in llama.cpp's format, with the running perplexity per chunk as llama-imatrix prints it."""
from __future__ import annotations

import argparse
import time

from edgeinfer.cli.files import check_writable_output, read_text_file
from edgeinfer.cli.output import stderr, stdout, warnings_on_stderr
from edgeinfer.cli.pull import RichReporter
from edgeinfer.imatrix import collect
from edgeinfer.model import Model
from edgeinfer.pull import resolve_model
from edgeinfer.quantize.imatrix_file import save


def main(args: argparse.Namespace) -> int:
    fmt = args.output_format or ("dat" if args.output.endswith(".dat") else "gguf")
    path = resolve_model(args.model, reporter=RichReporter(stderr))
    # Refused before the model runs: a long collection must not end in an unwritable path.
    check_writable_output(args.output, inputs=[path, args.file], force=args.force)
    text = read_text_file(args.file)
    with warnings_on_stderr():
        model = Model.load(path, n_ctx=args.ctx_size, n_threads=args.threads, n_batch=args.ctx_size)
    start = time.perf_counter()

    def on_chunk(i: int, n: int, ppl: float) -> None:
        stderr.print(f"[{i + 1}]{ppl:.4f}", end="," if i + 1 < n else "\n", highlight=False, soft_wrap=True)

    dataset = "" if args.file == "-" else args.file
    result = collect(model, text, n_ctx=args.ctx_size, n_chunks=args.chunks, include_output=args.process_output,
                     dataset=dataset, on_chunk=on_chunk)
    save(result.imatrix, args.output, fmt)
    seconds = time.perf_counter() - start
    stdout.print(f"Final estimate: PPL = {result.ppl:.4f} +/- {result.ppl_stderr:.5f}", highlight=False)
    stdout.print(f"saved the importance matrix of {len(result.imatrix.entries)} weights ({result.n_chunks} chunks "
                 f"of {args.ctx_size} tokens, {seconds:.1f} s) to {args.output}", highlight=False, soft_wrap=True)
    return 0
