"""``edgeinfer quantize IN.gguf OUT.gguf TYPE``: write a smaller copy of a model (see
edgeinfer.quantize). Progress and the summary go to stderr; nothing is written under OUT until the
whole file is complete, and an OUT that cannot be written is refused before any work
(edgeinfer.output_file; an existing file needs --force)."""
from __future__ import annotations

import argparse
import signal

from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from edgeinfer.cli.output import stderr, warnings_on_stderr
from edgeinfer.quantize import QuantizeOptions, TensorPlan, parse_tensor_type, parse_type, quantize_file
from edgeinfer.quantize.imatrix_file import load as load_imatrix


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def options_from_args(args: argparse.Namespace) -> QuantizeOptions:
    return QuantizeOptions(
        preset=args.type.upper(),
        pure=args.pure,
        output_tensor_type=parse_type(args.output_tensor_type) if args.output_tensor_type else None,
        token_embedding_type=parse_type(args.token_embedding_type) if args.token_embedding_type else None,
        tensor_types=[parse_tensor_type(s) for s in args.tensor_type],
        allow_requantize=args.allow_requantize,
        has_imatrix=args.imatrix is not None,
    )


def _terminate_as_interrupt(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt


def main(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    imatrix = load_imatrix(args.imatrix) if args.imatrix else None
    if imatrix is not None:
        stderr.print(f"importance matrix: {len(imatrix.entries)} entries, {imatrix.chunk_count} chunks"
                     + (f" of {imatrix.datasets[0]}" if imatrix.datasets else ""), highlight=False, soft_wrap=True)
    # SIGTERM unwinds like Ctrl-C, so the partial output file is removed on the way out.
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                        TimeRemainingColumn(), console=stderr, transient=True)
    task = None

    def on_plan(plans: list[TensorPlan]) -> None:
        nonlocal task
        for p in plans:
            if p.notice:
                stderr.print(f"[yellow]notice:[/] {p.notice}", highlight=False, soft_wrap=True)
        progress.start()   # only now: an error found before the work is one line, no bar
        task = progress.add_task("", total=len(plans))

    verbose = bool(getattr(args, "verbose", False))

    def on_tensor(plan: TensorPlan, bytes_in: int, bytes_out: int) -> None:
        change = (f"{plan.src_type.name}->{plan.dst_type.name}" if plan.src_type != plan.dst_type
                  else f"{plan.src_type.name} copied")
        line = f"{plan.name} {change} {_mib(bytes_in)} -> {_mib(bytes_out)}"
        if verbose:  # one line per tensor, as llama-quantize prints
            dims = "x".join(str(d) for d in plan.shape)
            progress.console.print(f"{line} [{dims}]", highlight=False, markup=False, soft_wrap=True)
        progress.update(task, advance=1, description=line)

    try:
        with warnings_on_stderr("warning"):
            result = quantize_file(args.input, args.output, options, n_threads=args.threads,
                                   on_plan=on_plan, on_tensor=on_tensor, force=args.force,
                                   imatrix=imatrix, imatrix_path=args.imatrix)
    finally:
        if progress.live.is_started:
            progress.stop()
    stderr.print(f"model size: {_mib(result.bytes_in)} ({result.bpw_in:.2f} bpw) -> "
                 f"{_mib(result.bytes_out)} ({result.bpw_out:.2f} bpw), "
                 f"{len(result.plans)} tensors, {len(result.notices)} fallbacks, {result.seconds:.1f} s",
                 highlight=False, soft_wrap=True)
    stderr.print(f"wrote {args.output} ({result.file_size_out / 1e6:.1f} MB)", highlight=False, soft_wrap=True)
    return 0
