"""``edgeinfer convert HF_DIR OUT.gguf [--outtype f16]``: a Hugging Face checkpoint folder to a GGUF
file (see edgeinfer.convert). Progress and the summary go to stderr; an OUT that cannot be written is
refused before any work (edgeinfer.output_file; an existing file needs --force)."""
from __future__ import annotations

import argparse
import os
import signal

from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from edgeinfer.cli.output import stderr, warnings_on_stderr
from edgeinfer.convert import convert_checkpoint
from edgeinfer.quantize import TensorPlan


def _terminate_as_interrupt(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt


def main(args: argparse.Namespace) -> int:
    # SIGTERM unwinds like Ctrl-C, so the partial output file is removed on the way out.
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                        TimeRemainingColumn(), console=stderr, transient=True)
    task = None
    verbose = bool(getattr(args, "verbose", False))

    def on_plan(plans: list[TensorPlan]) -> None:
        nonlocal task
        for p in plans:
            if p.notice:
                stderr.print(f"[yellow]notice:[/] {p.notice}", highlight=False, soft_wrap=True)
        progress.start()   # only now: an error found before the work is one line, no bar
        task = progress.add_task("", total=len(plans))

    def on_tensor(plan: TensorPlan, nbytes: int) -> None:
        line = f"{plan.name} {plan.dst_type.name} [{'x'.join(str(d) for d in plan.shape)}]"
        if verbose:
            progress.console.print(line, highlight=False, markup=False, soft_wrap=True)
        progress.update(task, advance=1, description=line)

    try:
        with warnings_on_stderr():
            result = convert_checkpoint(args.input, args.output, args.outtype, n_threads=args.threads,
                                        on_plan=on_plan, on_tensor=on_tensor, force=args.force)
    finally:
        if progress.live.is_started:
            progress.stop()
    size = os.path.getsize(args.output)
    stderr.print(f"{result.arch}: {len(result.plans)} tensors, {result.n_elements / 1e6:.1f} M parameters, "
                 f"tokenizer pre '{result.pre_tokenizer}', {result.seconds:.1f} s", highlight=False, soft_wrap=True)
    stderr.print(f"wrote {args.output} ({size / 1e6:.1f} MB)", highlight=False, soft_wrap=True)
    return 0
