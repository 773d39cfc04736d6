"""Thread counts: a request above the logical CPUs is capped with a warning (edgeinfer.threads;
the command line's -t is tested in test_cli.py), and the core refuses absurd counts outright
instead of exhausting the machine."""
from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import edgeinfer.threads as threads
from edgeinfer import _core
from edgeinfer.errors import EdgeInferError
from edgeinfer.model import Model
from edgeinfer.threads import resolve_n_threads, usable_cpus
from support.cli import child_env
from support.tiny_llama import TinyConfig



@pytest.fixture
def two_cpus(monkeypatch):
    """This process may run on two logical CPUs, whatever the machine has."""
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 5}, raising=False)


@pytest.fixture(scope="module")
def tiny_path(tiny_llama_file) -> Path:
    return tiny_llama_file(TinyConfig(weight_type="Q8_0"))[0]


def test_a_request_above_the_cpus_is_capped_with_a_warning_saying_why(two_cpus):
    with pytest.warns(UserWarning) as caught:
        assert resolve_n_threads(1000) == 2
    message = str(caught[0].message)
    assert "1000 threads requested" in message and "2 logical CPUs" in message and "using 2" in message
    assert "slower" in message


def test_a_request_within_the_cpus_is_kept_silently(two_cpus, recwarn):
    assert resolve_n_threads(1) == 1 and resolve_n_threads(2) == 2
    assert len(recwarn) == 0


def test_no_request_takes_the_default_capped_silently(two_cpus, recwarn):
    assert resolve_n_threads(None, default=1) == 1
    assert resolve_n_threads(0, default=64) == 2
    assert resolve_n_threads(None) == min(_core.physical_cores(), 2)
    assert len(recwarn) == 0
    with pytest.raises(ValueError, match="positive"):
        resolve_n_threads(-1)


def test_without_affinity_the_logical_cpu_count_is_the_cap(monkeypatch):
    monkeypatch.delattr(threads.os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 3)
    assert usable_cpus() == 3


def test_model_load_caps_its_thread_count(tiny_path):
    with pytest.warns(UserWarning, match="1000 threads requested"):
        model = Model.load(tiny_path, n_ctx=32, n_threads=1000)
    assert model.n_threads == usable_cpus()
    assert model.eval_logits([3, 4, 5]).shape[0] == 3


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
    assert _core.Context(core, n_ctx=32, n_threads=usable_cpus() + 1).n_threads == usable_cpus() + 1



# 40 tokens: over the row count from which the layer's row-wise ops (norms, RoPE, GLU, residual
# adds) split across the pool's threads (layers/cpu_layer_ops.h, kParallelMinRows).
LONG_PROMPT = [(7 * i + 3) % 250 + 5 for i in range(40)]


def test_the_thread_count_changes_no_bit_of_a_prompts_logits(tiny_path, tmp_path):
    # Every op computes each row (element) alone, so how the rows are shared among threads must not
    # show in the floats: llama (SwiGLU) and gemma3 (GeGLU, q/k and post norms, a sliding window).
    from support.tiny_gemma3 import TinyGemma3Config, write_tiny_gemma3
    gemma_path = tmp_path / "tiny-gemma3.gguf"
    write_tiny_gemma3(gemma_path, TinyGemma3Config(weight_type="Q8_0"))
    for path in (tiny_path, gemma_path):
        one = Model.load(path, n_ctx=64, n_threads=1).eval_logits(LONG_PROMPT)
        two = Model.load(path, n_ctx=64, n_threads=2).eval_logits(LONG_PROMPT)
        np.testing.assert_array_equal(two, one)


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
                          timeout=60, env=child_env())
    assert proc.returncode == 0, proc.stderr
    assert "could not start a pool of 4 threads" in proc.stdout
