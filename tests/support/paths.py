"""Where things are in the repository (tests/support/paths.py is two levels below its root), and
its scripts/ loaded as modules."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPTS_DIR = REPO_ROOT / "scripts"


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py as a module (scripts/ is not a package), loaded once. It is registered in
    sys.modules under `scripts.<name>` while it runs, as dataclasses need."""
    key = f"scripts.{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, SCRIPTS_DIR / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[key]
            raise
    return sys.modules[key]
