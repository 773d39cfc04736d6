"""Where edgeinfer keeps its files on this machine.

Locations follow each OS's conventions through `platformdirs` (e.g. ``~/.local/share/edgeinfer``
on Linux, ``~/Library/Application Support/edgeinfer`` on macOS). Environment variables override
them for tests, CI and users with a big disk elsewhere.
"""
from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "edgeinfer"
MODELS_DIR_ENV = "EDGEINFER_MODELS_DIR"


def data_dir() -> Path:
    """The per-user data folder (not created)."""
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def models_dir() -> Path:
    """The folder holding pulled model files: ``$EDGEINFER_MODELS_DIR`` or ``<data dir>/models``.

    The folder is not created here; writers create it when they first put a file in it.
    """
    override = os.environ.get(MODELS_DIR_ENV)
    if override:
        return Path(override).expanduser()
    return data_dir() / "models"


def chat_history_file() -> Path:
    """The input history of ``edgeinfer chat``: ``<data dir>/chat_history`` (not created)."""
    return data_dir() / "chat_history"
