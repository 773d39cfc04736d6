"""llama.cpp's Python binding in its own virtual environment, where scripts/bench_compare.py makes
it (the tests that run llama.cpp itself skip without it): found where the script puts it."""
from __future__ import annotations

import glob
import os
import subprocess
from pathlib import Path

from support.paths import load_script

_bench_compare = load_script("bench_compare")
BENCH_VENV: Path = _bench_compare.default_venv()
BENCH_PYTHON: Path = _bench_compare.venv_python(BENCH_VENV)


def has_llama_cpp() -> bool:
    """Whether the venv's interpreter exists and imports llama_cpp."""
    return BENCH_PYTHON.exists() and subprocess.run([str(BENCH_PYTHON), "-c", "import llama_cpp"],
                                                    capture_output=True).returncode == 0


def libggml_base() -> Path | None:
    """The binding's libggml-base.so ($EDGEINFER_LIBGGML overrides the search), or None."""
    pattern = str(BENCH_VENV / "lib" / "python3*" / "site-packages" / "llama_cpp" / "lib" / "libggml-base.so")
    paths = glob.glob(os.environ.get("EDGEINFER_LIBGGML", pattern))
    return Path(paths[0]) if paths else None
