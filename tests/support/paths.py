"""Where things are: the repository root (tests/support/paths.py is two levels below it)."""
from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
