"""Runs fuzz variants through child processes (tests/support/gguf_fuzz_child.py) under an address-space
limit and a timeout, so a segfault, a hang or a runaway allocation is a result, not the end of
the run. Shared by the fuzz tests and scripts/fuzz_gguf.py.

Many variants go to one child (starting Python and numpy costs more than most variants). The
child reports each variant as soon as it is done, in order, so when it dies or stops answering
the variant it was on is the first unreported one: that one is re-run alone in a fresh child to
confirm and name it, and the rest of the batch goes on in a new child.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from support.cli import child_env

CHILD = Path(__file__).with_name("gguf_fuzz_child.py")
MEMORY_LIMIT = 2 << 30   # bytes of address space for a child
STARTUP_SECONDS = 60.0   # allowance for a child's imports on a busy machine, before its first result
# What each child mode may answer. Everything else fails: "other" (an exception outside the
# project's family), "crash" (a signal or an abnormal exit), "hang" (no answer within the
# timeout), "batch_death" (the batch's child died on a variant that passes alone: an earlier
# one corrupted something).
ACCEPTABLE = {"reader": {"ok", "format_error"}, "model": {"ok", "format_error", "error"}}


@dataclass
class Result:
    outcome: str
    stage: str = ""
    type: str = ""
    message: str = ""


@dataclass
class ChildSpec:
    mode: str
    timeout: float
    memory_limit: int
    child: Path
    startup: float


def _run_child(items: list[tuple[int, str]], spec: ChildSpec) -> tuple[dict[int, Result], str, str]:
    """Runs one child on `items`. Returns the results it reported, how it ended ("exit", "crash"
    or "hang") and a note (signal or exit code, the end of its stderr)."""
    results: dict[int, Result] = {}
    timeout = spec.timeout
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, str(spec.child), spec.mode, str(spec.memory_limit)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                env=child_env(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1"))
        proc.stdin.write(json.dumps(items).encode())
        proc.stdin.close()
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + spec.startup + timeout
        pending, how = b"", ""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                how = "hang"
                break
            if not sel.select(left):
                continue
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                if line.startswith(b"{"):
                    r = json.loads(line)
                    variant_id = r.pop("id")
                    results[variant_id] = Result(**r)
                    deadline = time.monotonic() + timeout
        sel.close()
        rc = proc.wait()
        proc.stdout.close()
        err.seek(0)
        stderr = err.read()[-1500:].decode(errors="replace").strip()
    if how == "hang":
        note = f"no answer within {timeout:g} s"
    elif rc < 0:
        how, note = "crash", f"killed by {signal.Signals(-rc).name}"
    elif rc != 0:
        how, note = "crash", f"exit code {rc}"
    else:
        how, note = "exit", ""
    if stderr and how != "exit":
        note += f"; stderr: {stderr}"
    return results, how, note


def run_variants(items: list[tuple[int, str]], mode: str, timeout: float = 10.0, memory_limit: int = MEMORY_LIMIT,
                 child: Path = CHILD, startup: float = STARTUP_SECONDS) -> tuple[dict[int, Result], list[str]]:
    """Results for every (id, path) in `items`, crashes and hangs included, and notes on child
    endings that no variant can be blamed for (a crash after the last result). `timeout`: seconds
    a variant may take; `startup`: more for the first one (the child's imports)."""
    spec = ChildSpec(mode, timeout, memory_limit, child, startup)
    results: dict[int, Result] = {}
    notes: list[str] = []
    pending = list(items)
    while pending:
        got, how, note = _run_child(pending, spec)
        results.update(got)
        pending = [item for item in pending if item[0] not in results]
        if not pending:
            if how != "exit":
                notes.append(f"a child ended with a {how} after its last result ({note})")
            break
        culprit, pending = pending[0], pending[1:]
        alone, how_alone, note_alone = _run_child([culprit], spec)
        if how_alone != "exit":
            results[culprit[0]] = Result(how_alone, message=note_alone)
        elif culprit[0] in alone:
            r = alone[culprit[0]]
            results[culprit[0]] = Result("batch_death", r.stage, r.type,
                                         f"the batch's child ended ({how}: {note}) on this variant, which "
                                         f"alone gives {r.outcome}: {r.type}: {r.message}")
        else:
            results[culprit[0]] = Result("crash", message="the child exited without a result")
    return results, notes


def is_failure(mode: str, result: Result) -> bool:
    return result.outcome not in ACCEPTABLE[mode]
