"""OpenCL discovery: the run-time loaded library lists PoCL's CPU device with sane fields, the
CLI agrees, and a machine without the library lists nothing, says why and exits 0.

PoCL (Debian's pocl-opencl-icd) is installed by scripts/test.sh. Without it the device tests
skip with the loader's reason, except under CI=true or EDGEINFER_REQUIRE_MODELS=1, where they fail.
"""
from __future__ import annotations

import json
import os
import sys

import pytest

from edgeinfer import _core
from edgeinfer.gpu.devices import list_devices
from support.cli import run_cli

MISSING_LIBRARY = "/nonexistent/libOpenCL.so"
FIELDS = {"platform", "platform_vendor", "platform_version", "name", "vendor", "type",
          "compute_units", "global_mem_bytes", "max_alloc_bytes", "opencl_version", "fp16"}


def test_lists_a_device_with_sane_fields(opencl_devices):
    for d in opencl_devices:
        assert set(d) == FIELDS
        assert d["name"] and d["platform"] and d["vendor"]
        assert d["type"] in {"GPU", "CPU", "accelerator", "custom", "other"}
        assert d["compute_units"] >= 1
        assert d["global_mem_bytes"] > 0
        assert 0 < d["max_alloc_bytes"] <= d["global_mem_bytes"]
        assert d["opencl_version"].startswith("OpenCL ")
        assert d["platform_version"].startswith("OpenCL ")
        assert isinstance(d["fp16"], bool)


def test_pocl_is_among_the_platforms_when_installed(opencl_devices):
    if not os.path.exists("/etc/OpenCL/vendors/pocl.icd"):
        pytest.skip("PoCL's ICD file is not installed")
    assert any("Portable Computing Language" in d["platform"] for d in opencl_devices)


def test_cli_json_agrees_with_the_core(opencl_devices):
    proc = run_cli("devices", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out == {"devices": opencl_devices, "reason": ""}


def test_cli_table_names_each_device(opencl_devices):
    proc = run_cli("devices", env={"COLUMNS": "200"})  # wide enough that no name wraps
    assert proc.returncode == 0, proc.stderr
    for d in opencl_devices:
        assert d["name"] in proc.stdout and d["platform"] in proc.stdout
    assert "fp16" in proc.stdout and "max alloc" in proc.stdout


def test_cli_table_fits_80_columns_without_losing_the_numbers(opencl_devices):
    proc = run_cli("devices", env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80
    for d in opencl_devices:
        assert f" {d['compute_units']} " in proc.stdout
        assert " ".join(d["opencl_version"].split()[:2]) in proc.stdout


def test_missing_library_is_an_empty_list_with_a_reason():
    found, reason = _core.opencl_devices(library=MISSING_LIBRARY)
    assert found == []
    assert reason == f"no OpenCL library ({MISSING_LIBRARY} not found)"


def test_cli_without_library_prints_the_reason_and_exits_0():
    env = {"EDGEINFER_OPENCL_LIBRARY": MISSING_LIBRARY}
    proc = run_cli("devices", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "no OpenCL library" in proc.stdout and "Traceback" not in proc.stderr

    proc = run_cli("devices", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "devices": [], "reason": f"no OpenCL library ({MISSING_LIBRARY} not found)"}


def test_no_platform_is_an_empty_list_with_a_reason(opencl_devices, tmp_path):
    # The Khronos/ocl-icd loader reads its vendor list from OCL_ICD_VENDORS; an empty folder
    # leaves it with no platform, which it reports as CL_PLATFORM_NOT_FOUND_KHR.
    proc = run_cli("devices", "--json", env={"OCL_ICD_VENDORS": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"devices": [], "reason": "no OpenCL platforms"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses glibc's libc.so.6")
def test_a_library_that_is_not_opencl_is_a_clear_error():
    # libc opens fine but has no clGetPlatformIDs: an EdgeInferError naming the missing symbol.
    with pytest.raises(_core.EdgeInferError, match="clGetPlatformIDs is missing"):
        _core.opencl_devices(library="libc.so.6")
