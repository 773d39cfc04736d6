"""llama.cpp's own llama-server (the build scripts/llamacpp_bin.py makes) on a free loopback port,
for comparing tokens, embeddings and rerank scores with llama.cpp itself."""
from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from support.llamacpp_venv import llamacpp_tool
from support.server_process import free_port, wait_healthy


@contextmanager
def llamacpp_server(model: Path, *args: str, log_path: Path, timeout: float = 60.0) -> Iterator[str]:
    """`llama-server -m MODEL ARGS...` running; yields its base URL. The caller skips when
    llamacpp_tool("llama-server") is None."""
    tool = llamacpp_tool("llama-server")
    assert tool is not None, "no llama-server: skip before calling"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join([str(tool.parent), os.environ.get("LD_LIBRARY_PATH", "")])}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(tool), "-m", str(model), "--port", str(port), *args], env=env,
                                stdout=log, stderr=subprocess.STDOUT)
        def log_text() -> str:
            return log_path.read_text(errors="replace")

        try:
            if not wait_healthy(proc, url, timeout, log_text):
                raise RuntimeError(f"llama-server not healthy in {timeout} s:\n{log_text()}")
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
