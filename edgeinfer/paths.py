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
OPENCL_CACHE_ENV = "EDGEINFER_OPENCL_CACHE_DIR"


def data_dir() -> Path:
    """The per-user data folder (not created)."""
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def cache_dir() -> Path:
    """The per-user cache folder (not created): files that can be rebuilt if deleted."""
    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def opencl_cache_dir() -> Path:
    """Compiled OpenCL programs: ``$EDGEINFER_OPENCL_CACHE_DIR`` or ``<cache dir>/opencl``.

    The core creates it when it saves the first binary; deleting it only costs a recompile.
    """
    override = os.environ.get(OPENCL_CACHE_ENV)
    if override:
        return Path(override).expanduser()
    return cache_dir() / "opencl"


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
