"""Thread counts: the core refuses absurd counts outright instead of exhausting the machine, and a
pool the system cannot start is an error, not a crash or a hang."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from edgeinfer import _core
from edgeinfer.errors import EdgeInferError
from tiny_model import TinyConfig, write_tiny_llama

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("threads") / "tiny.gguf"
    write_tiny_llama(path, TinyConfig(weight_type="Q8_0"))
    return path


def test_the_core_refuses_absurd_thread_counts_at_once(tiny_path):
    # Without the bound, 100000 starts threads until the system refuses one (hundreds to tens of
    # thousands of them, all spinning on the CPUs).
    core = _core.Model(str(tiny_path))
    start = time.perf_counter()
    with pytest.raises(EdgeInferError, match="n_threads=100000 .* at most"):
        _core.Context(core, n_ctx=32, n_threads=100000)
    with pytest.raises(EdgeInferError, match="at most"):
        _core.quantize_rows(8, np.zeros((64, 32), np.float32), 100000)
    assert time.perf_counter() - start < 5
    # A few threads more than CPUs stay allowed: capping at the CPUs is the Python API's policy.
    assert _core.Context(core, n_ctx=32, n_threads=os.cpu_count() + 1).n_threads == os.cpu_count() + 1


_SPAWN_CHILD = """
import numpy as np
from edgeinfer import _core
from edgeinfer.errors import EdgeInferError
try:
    _core.quantize_rows(8, np.zeros((64, 32), np.float32), 4)
except EdgeInferError as exc:
    print(exc)
"""


def test_a_pool_the_system_cannot_start_is_an_error_not_a_hang():
    # 1 GiB thread stacks in a 4 GiB address space: the OS refuses one of the pool's first few
    # threads. The pool used to end the process (std::terminate on the threads it had started)
    # or hang in it (workers asleep on a condition variable being destroyed).
    def limits():
        resource.setrlimit(resource.RLIMIT_STACK, (1 << 30, 1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    proc = subprocess.run([sys.executable, "-c", _SPAWN_CHILD], preexec_fn=limits, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert "could not start a pool of 4 threads" in proc.stdout
