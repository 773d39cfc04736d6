"""`edgeinfer serve` as a real subprocess on a free loopback port, for the server tests."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import httpx
import openai

from support.cli import child_env
from support.paths import REPO_ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(proc: subprocess.Popen, url: str, timeout: float, log: Callable[[], str]) -> bool:
    """Polls `url`/health until it answers 200 (True) or `timeout` passes (False); RuntimeError
    with `log()` if the process exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}:\n{log()}")
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    return False


class ServerProcess:
    """`python -m edgeinfer serve [MODEL] ARGS... --port <free>`; `url` is the base (no /v1)."""

    def __init__(self, model: Path | None, *args: str, log_path: Path, timeout: float = 60.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edgeinfer", "serve", *([str(model)] if model else []), "--port", str(self.port), *args],
            cwd=REPO_ROOT, env=child_env(PYTHONUNBUFFERED="1"), stdout=self._log, stderr=subprocess.STDOUT)
        self._wait_healthy(timeout)

    def _wait_healthy(self, timeout: float) -> None:
        if wait_healthy(self.proc, self.url, timeout, self.log):
            return
        self.stop()
        raise RuntimeError(f"the server did not become healthy in {timeout} s:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@contextmanager
def openai_client(model: Path | None, alias: str | None, log_dir: Path, *args: str) -> Iterator[openai.OpenAI]:
    """A server for `model` under the name `alias` (None: every model of the models folder by its
    own name), and an `openai` client pointed at it."""
    naming = ("--alias", alias) if alias else ()
    proc = ServerProcess(model, *naming, *args, log_path=log_dir / "server.log")
    try:
        yield openai.OpenAI(base_url=f"{proc.url}/v1", api_key="none", max_retries=0)
    finally:
        proc.stop()
