"""How many threads to use: the one place a requested thread count becomes the count used.

More threads than the logical CPUs this process may run on never helps: the extra threads take
turns on the same CPUs, every parallel step waits for the slowest of them, and a count like 1000
makes the whole machine unresponsive. So a larger request is capped, with a warning that says so;
no request (None or 0) takes the caller's default, capped the same way but silently."""
from __future__ import annotations

import os
import warnings

from edgeinfer import _core


def usable_cpus() -> int:
    """Logical CPUs this process may run on (its CPU affinity where the OS has one, e.g. under
    `taskset` or a container's cpuset; else every logical CPU)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # macOS, Windows: no affinity query
        return os.cpu_count() or 1


def resolve_n_threads(requested: int | None, default: int | None = None, stacklevel: int = 1) -> int:
    """The thread count to use for `requested`: None/0 = `default` (None: the physical cores, the
    core's own choice), at most usable_cpus(); a request above that warns and gets the cap.
    stacklevel: as warnings.warn's, counted from the caller of this function (1: that caller)."""
    if requested is not None and requested < 0:
        raise ValueError(f"the thread count must be positive (or 0 for the default), got {requested}")
    cap = usable_cpus()
    if not requested:
        if default is None:
            default = _core.physical_cores()
        return max(1, min(default, cap))
    if requested > cap:
        cpus = f"{cap} logical CPU" + ("s" if cap > 1 else "")
        warnings.warn(f"{requested} threads requested, but this process can run on {cpus}; "
                      f"using {cap} (more threads than CPUs only compete for them and run slower)",
                      stacklevel=stacklevel + 1)
        return cap
    return requested
