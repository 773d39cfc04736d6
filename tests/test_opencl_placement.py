"""The OpenCL placement plan (edgeinfer/gpu/placement.py): --gpu-layers N|all|auto|list and
--device, computed from a tensor table and a device's memory with no device or model loaded; and
`edgeinfer info --gpu-layers` printing it. The plan logic runs on made-up devices; the CLI tests
use the real model files and, for the no-library path, EDGEINFER_OPENCL_LIBRARY at a missing file.
"""
from __future__ import annotations

import json

import pytest

from edgeinfer import _core
from edgeinfer.gpu.placement import (AUTO_MARGIN_MIN_BYTES, MIB, PlacementError, auto_budget, describe,
                                     format_layers, model_costs, parse_gpu_layers, plan_placement)
from edgeinfer.cli.wording import FLAGS, flag_spelling, in_flags
from support.cli import assert_clean_error, run_cli

MATMUL_TYPES = ["f32", "f16", "q4_0", "q4_1", "q5_0", "q8_0", "q4_K", "q6_K", "iq4_nl", "iq4_xs",
                "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m", "tq1_0", "tq2_0",
                "mxfp4"]
MISSING_LIBRARY = "/nonexistent/libOpenCL.so"


def fake_device(global_mib: int, max_alloc_mib: int | None = None, name: str = "Test GPU") -> dict:
    return {"name": name, "global_mem_bytes": global_mib * MIB,
            "max_alloc_bytes": (max_alloc_mib or global_mib // 4) * MIB}


def fake_model(n_layer: int = 10, layer_mib: int = 10, types: dict[int, str] | None = None) -> list[dict]:
    """A tensor table: per layer a norm (f32) and two matrices; plus embeddings and output."""
    tensors = [{"name": "token_embd.weight", "type_name": "q8_0", "nbytes": 50 * MIB},
               {"name": "output_norm.weight", "type_name": "f32", "nbytes": 4096}]
    for i in range(n_layer):
        wtype = (types or {}).get(i, "q4_0")
        tensors += [{"name": f"blk.{i}.attn_norm.weight", "type_name": "f32", "nbytes": 4096},
                    {"name": f"blk.{i}.attn_q.weight", "type_name": wtype, "nbytes": layer_mib * MIB // 2},
                    {"name": f"blk.{i}.ffn_up.weight", "type_name": wtype, "nbytes": layer_mib * MIB // 2}]
    return tensors


def costs(n_layer=10, layer_mib=10, types=None, n_ctx=1024, kv_per_position=1024):
    return model_costs(fake_model(n_layer, layer_mib, types), n_layer, n_ctx, kv_per_position, ("f16", "f16"))


def plan(spec: str, devices=None, index=0, c=None, **kw):
    devices = [fake_device(4096)] if devices is None else devices
    return plan_placement(c or costs(), parse_gpu_layers(spec), devices, index, MATMUL_TYPES, **kw)


# ---- parsing --------------------------------------------------------------------------------

def test_parse_counts_keywords_and_lists():
    assert parse_gpu_layers("4").kind == "count" and parse_gpu_layers("4").count == 4
    assert parse_gpu_layers("ALL").kind == "all" and parse_gpu_layers("auto").kind == "auto"
    assert parse_gpu_layers("0-5,12").layers == (0, 1, 2, 3, 4, 5, 12)
    assert parse_gpu_layers("7, 3-4,3").layers == (3, 4, 7)
    assert not parse_gpu_layers("0").wants_gpu and parse_gpu_layers("1").wants_gpu


@pytest.mark.parametrize("bad", ["-1", "1.5", "some", "3-1", "1,,2", ""])
def test_parse_rejects_what_it_cannot_read(bad):
    with pytest.raises(PlacementError, match="^gpu_layers: ") as caught:
        parse_gpu_layers(bad)
    assert caught.value.param == "gpu_layers"


def test_format_layers_compresses_ranges():
    assert format_layers([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8" and format_layers([]) == "none"


# ---- the plan -------------------------------------------------------------------------------

def test_n_is_the_last_n_layers_like_llama_cpp():
    p = plan("3")
    assert p.gpu_layers == (7, 8, 9) and p.ranges == [(7, 9)]
    assert p.gpu_weight_bytes == 3 * (10 * MIB + 4096)
    assert p.gpu_kv_bytes == 3 * 1024 * 1024
    # Everything else, plus embeddings and output, stays on the CPU: nothing is lost or counted twice.
    c = costs()
    total = sum(layer.weight_bytes for layer in c.layers) + c.other_weight_bytes
    assert p.gpu_weight_bytes + p.cpu_weight_bytes == total


def test_n_over_the_layer_count_and_all_mean_every_layer():
    assert plan("99").gpu_layers == tuple(range(10)) == plan("all").gpu_layers


def test_a_list_offloads_exactly_those_layers():
    p = plan("0-2,6")
    assert p.gpu_layers == (0, 1, 2, 6) and p.ranges == [(0, 2), (6, 6)]


def test_zero_is_cpu_only_and_needs_no_device():
    p = plan("0", devices=[])
    assert p.gpu_layers == () and p.device is None and p.gpu_weight_bytes == 0


def test_a_layer_that_does_not_exist_is_an_error():
    with pytest.raises(PlacementError, match="^gpu_layers: layer 10 does not exist .*10 layers: 0-9"):
        plan("8-10")


def test_a_device_that_does_not_exist_is_an_error_naming_where_devices_are_listed():
    with pytest.raises(PlacementError, match=r"^device=3: there is 1 OpenCL device \(0-0; see "
                                             r"edgeinfer\.gpu\.devices\.list_devices\(\)\)") as caught:
        plan("all", index=3)
    assert caught.value.param == "device"
    assert in_flags(caught.value) == "--device 3: there is 1 OpenCL device (0-0; see `edgeinfer devices`)"


def test_no_device_falls_back_to_the_cpu_with_the_reason_or_fails_with_require_gpu():
    p = plan("4", devices=[], no_device_reason="no OpenCL library (libOpenCL.so.1 not found)")
    assert p.gpu_layers == ()
    assert p.notes[0] == ("offload requested (gpu_layers=4) but no OpenCL library (libOpenCL.so.1 not found); "
                          "running on the CPU.")
    with pytest.raises(PlacementError, match=r"offload requested \(gpu_layers=4\) but no OpenCL library") as caught:
        plan("4", devices=[], no_device_reason="no OpenCL library (x)", require_gpu=True)
    assert caught.value.param == "require_gpu"
    assert in_flags(caught.value) == "offload requested (--gpu-layers 4) but no OpenCL library (x)"


def test_layers_with_types_the_device_lacks_stay_on_the_cpu_and_say_why():
    p = plan("all", c=costs(types={2: "q5_1", 3: "q2_K", 4: "q5_1"}))
    assert p.gpu_layers == (0, 1, 5, 6, 7, 8, 9)
    assert any("layers 2,4 stay on the CPU: q5_1 weights have no OpenCL kernel" in n for n in p.notes)
    assert any("layers 3 stay on the CPU: q2_K" in n for n in p.notes)


def test_the_cores_matmul_types_take_the_i_quant_ternary_and_mxfp4_layers():
    # The plan as the loader makes it (model_plan.py): with the core's own list of device types.
    types = {0: "mxfp4", 1: "iq4_nl", 2: "iq4_xs", 3: "iq2_xxs", 4: "iq3_s", 5: "iq2_s", 6: "iq1_s", 7: "iq1_m",
             8: "tq1_0", 9: "tq2_0"}
    p = plan_placement(costs(types=types), parse_gpu_layers("all"), [fake_device(4096)], 0,
                       _core.opencl_matmul_types())
    assert p.gpu_layers == tuple(range(10))
    assert not any("stay on the CPU" in n for n in p.notes)


def _with_experts(tensors: list[dict], layer: int, type_name: str) -> list[dict]:
    """`layer`'s up projection replaced by a stack of experts of `type_name`."""
    return [dict(t, name=f"blk.{layer}.ffn_up_exps.weight", type_name=type_name)
            if t["name"] == f"blk.{layer}.ffn_up.weight" else t for t in tensors]


def test_short_convolution_layers_go_to_the_device_and_cost_their_state_not_kv_rows():
    # LFM2's convolution layers run on the device with their recurrent state there (test_lfm2.py);
    # neither side writes K/V rows for them.
    tensors = fake_model(4) + [{"name": "blk.1.shortconv.conv.weight", "type_name": "f32", "nbytes": 64}]
    costs = model_costs(tensors, 4, 1024, 1024, ("f16", "f16"), conv_state_bytes=48)
    p = plan_placement(costs, parse_gpu_layers("all"), [fake_device(4096)], 0, MATMUL_TYPES)
    assert p.gpu_layers == (0, 1, 2, 3)
    assert [layer.kv_bytes for layer in costs.layers] == [1024 * 1024, 48, 1024 * 1024, 1024 * 1024]
    assert p.gpu_kv_bytes == 3 * 1024 * 1024 + 48


def test_mixture_of_experts_layers_are_offloaded_when_their_expert_types_are():
    # The device routes and runs the experts (test_opencl_offload_moe.py); their stacks are
    # matrices of their type like any other.
    tensors = _with_experts(_with_experts(fake_model(4), 1, "q4_K"), 2, "q5_1")
    p = plan_placement(model_costs(tensors, 4, 1024, 1024, ("f16", "f16")), parse_gpu_layers("all"),
                       [fake_device(4096)], 0, MATMUL_TYPES)
    assert p.gpu_layers == (0, 1, 3)
    assert "layers 2 stay on the CPU: q5_1 weights have no OpenCL kernel yet." in p.notes


def test_attention_sinks_and_an_output_bias_go_to_the_device():
    # gpt-oss's attn_sinks and attn_output.bias: the device's attention adds the sinks and its
    # layer the bias (test_opencl_offload_layer.py), so only its expert FFN keeps it on the CPU.
    tensors = fake_model(4) + [{"name": "blk.2.attn_sinks.weight", "type_name": "f32", "nbytes": 64},
                               {"name": "blk.2.attn_output.bias", "type_name": "f32", "nbytes": 4096}]
    p = plan_placement(model_costs(tensors, 4, 1024, 1024, ("f16", "f16")), parse_gpu_layers("all"),
                       [fake_device(4096)], 0, MATMUL_TYPES)
    assert p.gpu_layers == (0, 1, 2, 3)
    assert not any("stay on the CPU" in n for n in p.notes)


def test_a_tensor_over_the_largest_allocation_keeps_its_layer_on_the_cpu():
    p = plan("all", devices=[fake_device(4096, max_alloc_mib=4)])  # tensors of 5 MiB
    assert p.gpu_layers == ()
    assert "over the device's largest allocation" in p.notes[0]


def test_an_explicit_request_larger_than_the_device_is_an_error_naming_the_sizes():
    with pytest.raises(PlacementError, match=r"need 110\.\d MiB .* more than 'Small' has \(64\.0 MiB\)") as caught:
        plan("all", devices=[fake_device(64, name="Small")])
    assert str(caught.value).startswith("gpu_layers='all': layers 0-9 need")
    assert str(caught.value).endswith("; try gpu_layers='auto' or a smaller n_ctx")
    assert in_flags(caught.value).startswith("--gpu-layers all: layers 0-9 need")
    assert in_flags(caught.value).endswith("; try --gpu-layers auto or a smaller -c")


def test_notes_name_the_api_keyword_and_the_cli_its_flag():
    p = plan("0", devices=[])
    assert p.notes == ["gpu_layers=0: every layer runs on the CPU."]
    assert describe(p, ("f16", "f16"))[-1] == "gpu_layers=0: every layer runs on the CPU."
    assert describe(p, ("f16", "f16"), flag_spelling)[-1] == "--gpu-layers 0: every layer runs on the CPU."
    assert p.as_dict(flag_spelling)["notes"] == ["--gpu-layers 0: every layer runs on the CPU."]


# The commands whose messages can name each setting (placement: every command that loads a model).
COMMANDS_OF = {"gpu_layers": ("run", "chat", "serve", "info"), "device": ("run", "chat", "serve", "info"),
               "require_gpu": ("run", "chat", "serve", "info"), "n_ctx": ("run", "chat", "serve", "info"),
               "force": ("quantize", "convert"), "n_chunks": ("perplexity",), "tensor_types": ("quantize",),
               "n_parallel": ("serve", "bench"), "truncate": ("embed", "rerank")}


def test_every_flag_the_messages_name_is_one_the_commands_take():
    from edgeinfer.cli.args import build_parser

    assert set(COMMANDS_OF) == set(FLAGS)
    positional = {"run": ["--prompt", "x"], "quantize": ["in.gguf", "out.gguf", "Q8_0"], "convert": ["hf", "out.gguf"],
                  "perplexity": ["-f", "text.txt"], "embed": ["model.gguf"], "rerank": ["model.gguf", "query"]}
    for name, commands in COMMANDS_OF.items():
        flag = FLAGS[name]
        args = [flag] if flag in ("--require-gpu", "--force", "--truncate") else [flag, "1"]
        for command in commands:
            build_parser().parse_args([command] + positional.get(command, []) + args)


def test_auto_fits_the_last_layers_within_the_margin_and_explains():
    # 1 GiB device: the margin is max(10%, 256 MiB) = 256 MiB, leaving 768 MiB; each layer
    # needs 10 MiB of weights + 64 MiB of KV (1024 tokens x 64 kB), so 10 layers of 74 MiB fit.
    c = costs(n_ctx=1024, kv_per_position=64 * 1024)
    dev = fake_device(1024)
    assert auto_budget(dev) == 1024 * MIB - AUTO_MARGIN_MIN_BYTES
    p = plan("auto", devices=[dev], c=c)
    assert p.gpu_layers == tuple(range(10))
    # A longer context: 128 MiB of KV per layer, 138 MiB a layer -> the last 5 fit (690 MiB).
    c = costs(n_ctx=2048, kv_per_position=64 * 1024)
    p = plan("auto", devices=[dev], c=c)
    assert p.gpu_layers == (5, 6, 7, 8, 9)
    note = next(n for n in p.notes if n.startswith("auto:"))
    assert note.startswith("auto: 'Test GPU' has 1.00 GiB") and "leaves 768.0 MiB" in note
    assert "5 of 10 offloadable layers fit" in note


def test_auto_margin_is_ten_percent_on_a_big_device():
    total = 16 * 1024 * MIB
    assert auto_budget(fake_device(16 * 1024)) == total - int(total * 0.1)


def test_describe_gives_one_line_per_device_and_the_notes():
    p = plan("2", c=costs(types={9: "q5_1"}))
    lines = describe(p, ("f16", "q8_0"))
    assert lines[0].startswith("OpenCL device 0 (Test GPU): layers 8 (1 of 10)")
    assert "KV f16/q8_0" in lines[0]
    assert lines[1].startswith("CPU: layers 0-7,9 (9 of 10) + embeddings and output")
    assert "q5_1" in lines[2]
    # Host memory is not understated: the staging copy of the device KV rows is named.
    assert lines[-1].startswith("the host KV cache also holds a staging copy") and "1.0 MiB" in lines[-1]


def test_the_core_lists_the_matmul_types_the_plan_assumes():
    assert sorted(_core.opencl_matmul_types()) == sorted(MATMUL_TYPES)


# ---- edgeinfer info --gpu-layers ------------------------------------------------------------

@pytest.mark.realmodel
def test_info_prints_the_plan_without_loading(smollm2_path):
    proc = run_cli("info", str(smollm2_path), "--gpu-layers", "4", "--json", "-c", "2048")
    assert proc.returncode == 0, proc.stderr
    placement = json.loads(proc.stdout)["placement"]
    n_layer = placement["n_layer"]
    assert n_layer == 30
    if placement["device"] is None:  # no OpenCL here: the plan says why and keeps the CPU
        assert placement["gpu_layers"] == [] and "running on the CPU" in placement["notes"][0]
        return
    assert placement["gpu_layers"] == [26, 27, 28, 29] and placement["ranges"] == [[26, 29]]
    # SmolLM2: 3 KV heads x 64 = 192 values for K and for V, f16, at 2048 positions, per layer.
    assert placement["gpu_kv_bytes"] == 4 * 2048 * 2 * 192 * 2
    assert placement["lines"][0].startswith("OpenCL device 0 (")


@pytest.mark.realmodel
def test_info_counts_a_centered_caches_sink_rows_and_means(smollm2_path):
    proc = run_cli("info", str(smollm2_path), "--gpu-layers", "4", "--json", "-c", "2048", "--ctk", "q4_0",
                   "--ctv", "q8_0")
    assert proc.returncode == 0, proc.stderr
    placement = json.loads(proc.stdout)["placement"]
    if placement["device"] is None:
        pytest.skip("no OpenCL device")
    # Per layer: 2048 rows of q4_0 K (192 values: 6 blocks of 18 B) and q8_0 V (6 blocks of 34 B),
    # plus what a q4_0 K's centering keeps: the first kv_sink_rows positions of K and V in F16
    # and the K mean, K scale and V mean as floats.
    rows = 2048 * (6 * 18 + 6 * 34)
    extra = _core.kv_sink_rows * (192 + 192) * 2 + (2 * 192 + 192) * 4
    assert placement["gpu_kv_bytes"] == 4 * (rows + extra)


@pytest.mark.realmodel
def test_info_table_shows_the_plan_for_gemma3(gemma3_path):
    proc = run_cli("info", str(gemma3_path), "--gpu-layers", "0-5,12", "--ctk", "q8_0", env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "placement (--gpu-layers 0-5,12, context 4,096)" in proc.stdout
    assert "CPU: layers" in proc.stdout and "KV q8_0/f16" in proc.stdout


@pytest.mark.realmodel
def test_info_without_a_library_warns_and_with_require_gpu_fails(smollm2_path):
    env = {"EDGEINFER_OPENCL_LIBRARY": MISSING_LIBRARY}
    proc = run_cli("info", str(smollm2_path), "--gpu-layers", "all", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    placement = json.loads(proc.stdout)["placement"]
    assert placement["gpu_layers"] == [] and placement["device"] is None
    assert f"no OpenCL library ({MISSING_LIBRARY} not found); running on the CPU" in placement["notes"][0]

    proc = run_cli("info", str(smollm2_path), "--gpu-layers", "all", "--require-gpu", env=env)
    assert_clean_error(proc, "offload requested (--gpu-layers all) but no OpenCL library")


@pytest.mark.realmodel
def test_info_refuses_a_bad_gpu_layers_value_cleanly(smollm2_path):
    assert_clean_error(run_cli("info", str(smollm2_path), "--gpu-layers", "28-31"),
                       "layer 30 does not exist (the model has 30 layers: 0-29)")
    assert_clean_error(run_cli("info", str(smollm2_path), "--gpu-layers", "most"),
                       "is not a number, 'all', 'auto' or a list")


def test_compiled_programs_go_to_the_user_cache_folder_or_the_override(monkeypatch, tmp_path):
    import platformdirs

    from edgeinfer.paths import OPENCL_CACHE_ENV, opencl_cache_dir

    monkeypatch.delenv(OPENCL_CACHE_ENV, raising=False)
    assert opencl_cache_dir() == platformdirs.user_cache_path("edgeinfer", appauthor=False) / "opencl"
    monkeypatch.setenv(OPENCL_CACHE_ENV, str(tmp_path))
    assert opencl_cache_dir() == tmp_path
