"""--gpu-layers on `edgeinfer serve` and `edgeinfer bench` (run and chat have their own tests): the
layers go to the OpenCL device (PoCL here), the load says so, and without a device the command
says why and runs on the CPU, or fails with --require-gpu."""
from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from edgeinfer.bench import run_bench
from edgeinfer.cli.args import build_parser
from edgeinfer.cli.serve import make_config
from support.cli import assert_clean_error, run_cli
from support.server_process import ServerProcess

pytestmark = pytest.mark.usefixtures("opencl_cache_in_a_temp_folder")

NO_LIBRARY = {"EDGEINFER_OPENCL_LIBRARY": "/nonexistent/libOpenCL.so.1"}


def test_serve_options_reach_the_config():
    args = build_parser().parse_args(["serve", "smollm2", "--gpu-layers", "0-5,12", "--device", "1",
                                      "--require-gpu"])
    config = make_config(args)
    assert config.gpu == {"gpu_layers": "0-5,12", "device": 1, "require_gpu": True}
    assert make_config(build_parser().parse_args(["serve"])).gpu is None


@pytest.mark.realmodel
def test_bench_offloads_the_layers_it_is_asked_to(smollm2_path, device_index):
    results = run_bench(smollm2_path, n_prompt=[8], n_gen=[2], threads=[1], repetitions=1,
                        gpu={"gpu_layers": "2", "device": device_index})
    assert [r.n_gpu_layers for r in results] == [2, 2]
    assert all(r.avg_ts > 0 for r in results)
    proc = run_cli("bench", str(smollm2_path), "-p", "8", "-n", "0", "-r", "1", "-t", "1", "-ngl", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["n_gpu_layers"] for r in json.loads(proc.stdout)] == [2]


@pytest.mark.realmodel
def test_bench_without_opencl_says_why_and_runs_on_the_cpu_or_fails_when_required(smollm2_path):
    proc = run_cli("bench", str(smollm2_path), "-p", "8", "-n", "0", "-r", "1", "-t", "1", "--gpu-layers", "all",
                   env=NO_LIBRARY)
    assert proc.returncode == 0, proc.stderr
    assert "no OpenCL library" in proc.stderr and "running on the CPU" in proc.stderr
    assert "offload requested (--gpu-layers all)" in proc.stderr   # the library's note, in flags
    assert "Traceback" not in proc.stderr
    proc = run_cli("bench", str(smollm2_path), "-p", "8", "-n", "0", "-r", "1", "--gpu-layers", "all",
                   "--require-gpu", env=NO_LIBRARY)
    assert_clean_error(proc, "no OpenCL library")


@pytest.mark.realmodel
def test_serve_with_offloaded_layers_answers_and_says_what_went_where(smollm2_path, device_index,
                                                                      tmp_path):
    server = ServerProcess(smollm2_path, "-c", "256", "--gpu-layers", "4", "--device", str(device_index),
                           log_path=tmp_path / "serve.log", timeout=300)
    try:
        r = httpx.post(f"{server.url}/v1/completions", json={"prompt": "The capital of France is",
                                                             "max_tokens": 4, "temperature": 0}, timeout=300)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] >= 1
        log = server.log()
        assert "offload:" in log and "layers 26-29" in log, log
    finally:
        server.stop()
