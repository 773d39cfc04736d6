"""`edgeinfer` as a user runs it: in a subprocess (with the child environment that imports this
tree) or in this process, and the shape every user-caused failure must have
(edgeinfer/cli/__init__.py: one `error: ...` line, exit status 1, no traceback)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import edgeinfer

# The folder holding the edgeinfer package this process runs: the repository's root, except when
# the tests are pointed at another build of the package.
IMPORT_ROOT = Path(edgeinfer.__file__).resolve().parent.parent


def child_env(**extra: str) -> dict[str, str]:
    """os.environ for a child Python that imports the edgeinfer this process imported (the
    installed package may be another checkout's; scripts/test_avx512_emulated.sh tests a build
    outside the tree), without EDGEINFER_DEBUG (it turns error lines into tracebacks); plus
    `extra`."""
    env = {k: v for k, v in os.environ.items() if k != "EDGEINFER_DEBUG"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(IMPORT_ROOT), os.environ.get("PYTHONPATH")]))
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m edgeinfer ARGS...`, output captured as text; `env` adds to child_env()."""
    return subprocess.run([sys.executable, "-m", "edgeinfer", *args], capture_output=True, text=True,
                          env=child_env(**(env or {})), timeout=timeout)


def run_main(capsys, *args: str) -> subprocess.CompletedProcess:
    """edgeinfer.cli.main(ARGS) in this process, its output read from pytest's capsys: the same
    result as run_cli, for commands whose inputs the test patches or that are slow to start."""
    from edgeinfer.cli import main

    capsys.readouterr()   # what came before is not this command's
    returncode = main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["edgeinfer", *args], returncode, out, err)


def assert_clean_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    """The command failed as a user should see it: exit status 1, nothing on stdout, stderr
    starting with `error: `, no traceback, and every fragment in it."""
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: "), proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, (fragment, proc.stderr)
    assert proc.stdout == ""
