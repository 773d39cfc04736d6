"""``edgeinfer devices``: the OpenCL platforms and devices this machine offers for offload.

When there is no OpenCL library, or it finds no platform or device, the reason is printed and the
exit status is still 0 (an empty list is an answer, not a failure). The listing itself, and the
``EDGEINFER_OPENCL_LIBRARY`` override, are edgeinfer.gpu.devices'.
"""
from __future__ import annotations

import argparse
import json

from rich.markup import escape
from rich.table import Table

from edgeinfer.cli.output import human_bytes, stdout
from edgeinfer.gpu.devices import list_devices


def _short_version(version: str) -> str:
    """'OpenCL 3.0 PoCL HSTR: ...' -> 'OpenCL 3.0' (the vendor part stays in --json)."""
    return " ".join(version.split()[:2])


def make_table(devices: list[dict]) -> Table:
    """One row per device; the index is the one ``--device`` takes."""
    platforms = sorted({f"{d['platform']} ({d['platform_vendor']}, "
                        f"{_short_version(d['platform_version'])})" for d in devices})
    table = Table(title="OpenCL devices", title_justify="left",
                  caption="platform: " + "; ".join(escape(p) for p in platforms),
                  caption_justify="left")
    # Names may wrap; the numbers and short fields never do.
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("device", ratio=2, overflow="fold")
    table.add_column("vendor", ratio=1, overflow="fold")
    table.add_column("type", no_wrap=True)
    for column in ("CUs", "memory", "max alloc"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("OpenCL", no_wrap=True)
    table.add_column("fp16", no_wrap=True)
    for i, d in enumerate(devices):
        table.add_row(str(i), escape(d["name"]), escape(d["vendor"]), d["type"],
                      str(d["compute_units"]), human_bytes(d["global_mem_bytes"]),
                      human_bytes(d["max_alloc_bytes"]), _short_version(d["opencl_version"]),
                      "yes" if d["fp16"] else "no")
    return table


def main(args: argparse.Namespace) -> int:
    devices, reason = list_devices()
    if args.json:
        print(json.dumps({"devices": devices, "reason": reason}, indent=2))
        return 0
    if not devices:
        stdout.print(f"no OpenCL devices: {escape(reason)}")
        return 0
    stdout.print(make_table(devices))
    return 0
