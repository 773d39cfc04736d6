"""The OpenCL devices this machine offers for offload, as the core lists them.

The OpenCL library is loaded at run time; ``EDGEINFER_OPENCL_LIBRARY`` names the library file to
open instead of the default ``libOpenCL.so.1`` (tests point it at a missing file to see the
no-library path). The placement plan, the loader and ``edgeinfer devices`` all read the devices
here, so they cannot disagree about which library or which device index they mean.
"""
from __future__ import annotations

import os

from edgeinfer import _core

LIBRARY_ENV = "EDGEINFER_OPENCL_LIBRARY"


def opencl_library() -> str:
    """The OpenCL library file to open ('' = the default, libOpenCL.so.1)."""
    return os.environ.get(LIBRARY_ENV, "")


def list_devices() -> tuple[list[dict], str]:
    """(devices, reason): every OpenCL device as a dict, and why the list is empty ('' if not)."""
    devices, reason = _core.opencl_devices(library=opencl_library())
    return list(devices), str(reason)
