"""What machine a measurement was made on, for benchmark reports (figures are only comparable on
the same CPU)."""
from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or what the platform module knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_summary() -> str:
    """CPU, logical CPU count and OS, on one line."""
    return f"{cpu_name()}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}"
