"""What a missing prerequisite does to a test: it skips, unless the run promised to have it.

scripts/test.sh (what CI runs) installs the system packages, fetches the real models and the chat
templates, then sets EDGEINFER_REQUIRE_MODELS=1: under it a missing prerequisite fails the test,
so a broken set-up cannot pass as a run of skips. The system packages (PoCL, the aarch64
toolchain) are required under CI=true as well (`in_ci`)."""
from __future__ import annotations

import os
from typing import NoReturn

import pytest


def required(*, in_ci: bool = False) -> bool:
    """Whether this run must have its prerequisites: under scripts/test.sh, and (`in_ci`) on CI."""
    return (os.environ.get("EDGEINFER_REQUIRE_MODELS") == "1"
            or (in_ci and os.environ.get("CI", "").lower() == "true"))


def unavailable(message: str, *, in_ci: bool = False) -> NoReturn:
    """Fails the calling test where the prerequisite is required (see required()), else skips it."""
    if required(in_ci=in_ci):
        pytest.fail(message)
    pytest.skip(message)
