"""The command line as people use it: a subprocess for errors and exit codes, and in-process
runs against a stand-in model for the streaming, timings and info output."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from edgeinfer.cli import main
from edgeinfer.cli.args import build_parser
from support.cli import assert_clean_error, run_cli
from support.tiny_llama import TinyConfig

# -- errors, as a subprocess -----------------------------------------------------------------

def test_unknown_model_name_is_one_clean_line():
    proc = run_cli("run", "no-such-model", "-p", "hi")
    assert_clean_error(proc, "unknown model 'no-such-model'")
    assert "smollm2-135m-instruct" in proc.stderr


def test_missing_file_is_one_clean_line(tmp_path):
    proc = run_cli("info", str(tmp_path / "missing.gguf"))
    assert_clean_error(proc, "no such model file")


def test_folder_instead_of_file_is_one_clean_line(tmp_path):
    assert_clean_error(run_cli("run", str(tmp_path), "-p", "hi"), "is a folder")


def test_verbose_shows_the_traceback():
    proc = run_cli("run", "no-such-model", "-p", "hi", "--verbose")
    assert proc.returncode != 0 and "Traceback" in proc.stderr
    proc = run_cli("run", "no-such-model", "-p", "hi", env={"EDGEINFER_DEBUG": "1"})
    assert "Traceback" in proc.stderr


@pytest.mark.parametrize("args", [
    ["run"],                               # no prompt
    ["run", "-p", "x", "-f", "y"],         # both prompt sources
    ["run", "-p", "x", "-n", "0"],         # non-positive count
    ["run", "-p", "x", "--temp", "hot"],   # not a number
    ["frobnicate"],                        # no such command
    ["run", "-p", "x", "--temp", "-1"],    # out of range: refused like /set and the server do
    ["run", "-p", "x", "--top-p", "1.5"],
    ["run", "-p", "x", "--top-k", "true"],
    ["serve", "--prompt-cache-size", "lots"],
    [],                                    # no command
])
def test_argument_errors_exit_2_with_usage(args):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert "usage:" in proc.stderr and "Traceback" not in proc.stderr


def test_sampling_flags_say_what_they_take():
    proc = run_cli("run", "-p", "x", "--temp", "-1")
    assert "argument --temp: expected a number >= 0, got -1" in proc.stderr
    from edgeinfer.cli.args import build_parser

    args = build_parser().parse_args(["serve", "--seed", "-1", "--prompt-cache-size", "512M"])
    assert args.seed is None and args.prompt_cache_size == 512 << 20


def test_models_lists_known_models(tmp_path):
    proc = run_cli("models", env={"EDGEINFER_MODELS_DIR": str(tmp_path)})
    assert proc.returncode == 0
    assert "smollm2-135m-instruct *" in proc.stdout and "gemma3-270m" in proc.stdout
    assert str(tmp_path) in proc.stdout.replace("\n", "")


def test_pull_unknown_name_is_one_clean_line():
    assert_clean_error(run_cli("pull", "llama-70b"), "unknown model 'llama-70b'")


def test_version():
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("edgeinfer ")


# -- run and info in-process, against a stand-in for edgeinfer.model.Model --------------------

@dataclass
class FakeResult:
    tokens: list
    text: str
    finish_reason: str
    prompt_tokens: int
    timings: dict = field(default_factory=dict)


class FakeModel:
    """Implements the slice of the Model API the CLI uses."""

    last: "FakeModel | None" = None
    pieces = ["Paris", ".", " It"]
    interrupt_after: int | None = None

    def __init__(self, path, n_ctx, n_threads):
        self.path, self.n_ctx, self.n_threads = Path(path), n_ctx, n_threads
        self.arch, self.n_params, self.n_ctx_train = "llama", 134_515_008, 8192
        self.file_size, self.isa = 98_362_432, "avx2"
        self.metadata = {"general.architecture": "llama", "llama.context_length": 8192,
                         "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm",
                         "tokenizer.ggml.tokens": ["a"] * 49152,
                         "tokenizer.chat_template": "{{ x }}"}
        self.tensor_infos = [
            {"name": "token_embd.weight", "type_name": "Q8_0", "shape": [576, 49152],
             "nbytes": 30_081_024},
            {"name": "blk.0.attn_q.weight", "type_name": "Q4_1", "shape": [576, 576],
             "nbytes": 207_360},
            {"name": "blk.0.attn_norm.weight", "type_name": "F32", "shape": [576], "nbytes": 2304},
        ]
        self.generate_kwargs = None
        self.placement = None   # no --gpu-layers: nothing offloaded
        FakeModel.last = self

    @classmethod
    def load(cls, path, n_ctx=2048, n_threads=None, cache_type_k="f16", cache_type_v="f16"):
        model = cls(path, n_ctx, n_threads)
        model.cache_types = (cache_type_k, cache_type_v)
        return model

    def tokenize(self, text, add_special=True, parse_special=False):
        return ([1] if add_special else []) + [ord(c) for c in text]

    def generate(self, prompt, **kwargs):
        self.prompt, self.generate_kwargs = prompt, kwargs
        for i, piece in enumerate(self.pieces):
            if self.interrupt_after is not None and i == self.interrupt_after:
                raise KeyboardInterrupt
            yield piece
        return FakeResult(tokens=[5, 6, 7], text="".join(self.pieces), finish_reason="length",
                          prompt_tokens=6, timings={"load_ms": 1.0, "prompt_ms": 2.0,
                                                    "prompt_tok_s": 3000.0, "gen_ms": 30.0,
                                                    "gen_tok_s": 100.0})


@pytest.fixture
def fake_model_file(tmp_path, monkeypatch):
    import edgeinfer.cli.run as run_command
    monkeypatch.setattr(run_command, "Model", FakeModel)
    monkeypatch.setattr(FakeModel, "interrupt_after", None)
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"GGUF")
    return path


def test_run_streams_pieces_to_stdout_and_timings_to_stderr(fake_model_file, capsys):
    assert main(["run", str(fake_model_file), "-p", "The capital of France is"]) == 0
    out, err = capsys.readouterr()
    assert out == "Paris. It\n"
    assert "prompt 6 tokens @ 3000.0 tok/s" in err
    assert "generated 3 tokens @ 100.0 tok/s" in err and "load " in err


def test_run_passes_options_through(fake_model_file, capsys):
    main(["run", str(fake_model_file), "-p", "hi", "-n", "7", "--temp", "0", "--top-k", "5",
          "--top-p", "0.5", "--min-p", "0.1", "--seed", "3", "--stop", "\n", "-t", "2",
          "-c", "256", "--repeat-penalty", "1.1", "--no-speculative"])
    m = FakeModel.last
    assert (m.n_ctx, m.n_threads, m.prompt) == (256, 2, "hi")
    assert m.generate_kwargs == dict(max_tokens=7, temperature=0.0, top_k=5, top_p=0.5,
                                     min_p=0.1, seed=3, stop=["\n"], repeat_penalty=1.1,
                                     context_overflow="stop", n_keep=None, speculative=False, draft=None)
    assert m.cache_types == ("f16", "f16")


def test_run_defaults_come_from_sampling_params(fake_model_file, capsys):
    from edgeinfer.sampling import SamplingParams
    main(["run", str(fake_model_file), "-p", "hi"])
    kw, d = FakeModel.last.generate_kwargs, SamplingParams()
    assert (kw["temperature"], kw["top_k"], kw["top_p"], kw["min_p"], kw["seed"]) == \
        (d.temperature, d.top_k, d.top_p, d.min_p, d.seed)
    assert kw["max_tokens"] == 128 and FakeModel.last.n_ctx == 2048


def test_run_no_bos_passes_ids_without_special_tokens(fake_model_file, capsys):
    main(["run", str(fake_model_file), "-p", "ab", "--no-bos"])
    assert FakeModel.last.prompt == [97, 98]


def test_run_reads_prompt_from_file(fake_model_file, tmp_path, capsys):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("from a file")
    main(["run", str(fake_model_file), "-f", str(prompt)])
    assert FakeModel.last.prompt == "from a file"


def test_ctrl_c_during_run_exits_130(fake_model_file, capsys):
    FakeModel.interrupt_after = 2
    assert main(["run", str(fake_model_file), "-p", "hi"]) == 130
    out, err = capsys.readouterr()
    assert out == "Paris.\n" and "interrupted" in err and "Traceback" not in err


@pytest.fixture
def tiny_model_file(tiny_llama_file):
    return tiny_llama_file(TinyConfig(weight_type="Q8_0"))[0]


def test_info_prints_the_summary(tiny_model_file, capsys):
    from edgeinfer import _core
    assert main(["info", str(tiny_model_file)]) == 0
    out = capsys.readouterr().out
    for fragment in ("llama", "tiny-random-llama", "256", "q8_0: 15 tensors", "f32:",
                     "gpt2 (pre: default)", "263 tokens", "chat template", _core.isa()):
        assert fragment in out, fragment


def test_info_says_why_an_unknown_pre_tokenizer_does_not_run(tiny_model_file, tmp_path, capsys):
    """info reads no vocabulary, but it knows the names the loader takes for tokenizer.ggml.pre."""
    from support.gguf_mutate import VT, load_base, set_kv

    path = set_kv(load_base("tiny", tiny_model_file), "tokenizer.ggml.pre", VT.STRING, b"tekken").write(
        tmp_path / "tekken.gguf")
    main(["info", str(path), "--json"])
    info = json.loads(capsys.readouterr().out)
    assert info["supported"] is False and info["tokenizer"]["pre_supported"] is False
    main(["info", str(path)])
    assert "pre-tokenizer 'tekken' is not implemented" in capsys.readouterr().out


def test_info_says_a_file_the_loader_refuses_does_not_run_and_gives_its_reason(tiny_model_file, tmp_path, capsys):
    """The metadata of a file without output_norm.weight looks runnable; the loader knows better."""
    path = tmp_path / "no-output-norm.gguf"
    path.write_bytes(tiny_model_file.read_bytes().replace(b"output_norm.weight", b"output_nrom.weight"))
    main(["info", str(path), "--json"])
    info = json.loads(capsys.readouterr().out)
    assert info["supported"] is False and info["architecture_supported"] is True and info["unsupported_types"] == []
    assert "tensor 'output_norm.weight': is missing" in info["load_error"]
    main(["info", str(path)])
    assert "runs here no: " in " ".join(capsys.readouterr().out.split())
    proc = run_cli("run", str(path), "-p", "hi", "-n", "1")
    assert_clean_error(proc, info["load_error"])   # the same words as the loader's refusal


def test_info_json(tiny_model_file, capsys):
    main(["info", str(tiny_model_file), "--json"])
    info = json.loads(capsys.readouterr().out)
    assert info["architecture"] == "llama" and info["supported"] is True and info["unsupported_types"] == []
    assert info["context_length"] == 256
    assert info["quantization"]["q8_0"]["tensors"] == 15
    assert info["tokenizer"] == {"model": "gpt2", "pre": "default", "pre_supported": True, "vocab_size": 263}
    assert info["chat_template"] is False
    # token_embd 263x64 + output 263x64 + 2 layers x (4x64x64/... ) : counted from the shapes
    assert info["parameters"] == 263 * 64 * 2 + 64 + 2 * (64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 96 * 64 + 2 * 64)


def test_info_names_the_types_this_version_cannot_run_and_loading_says_it_in_one_line(tmp_path, monkeypatch,
                                                                                    capsys):
    import dataclasses

    import gguf
    import numpy as np

    from edgeinfer import _core
    from support import gguf_writing
    from support.tiny_llama import KQUANTIZABLE, write_tiny_llama

    # A type with no kernels yet, its blocks random bytes (no quantizer writes it either).
    # (Q8_K: an activation type the reader knows, with no weight kernels; newer ggml types such as
    # NVFP4 are refused earlier, by the reader, as unknown type ids.)
    candidates = [getattr(gguf.GGMLQuantizationType, n) for n in ("Q8_K",)
                  if hasattr(gguf.GGMLQuantizationType, n)]
    missing = next(t for t in candidates if t.name.lower() not in [w.lower() for w in _core.weight_types()])
    block, size = gguf.GGML_QUANT_SIZES[missing]
    rng = np.random.default_rng(0)
    monkeypatch.setattr(gguf_writing, "_quantize", lambda value, qtype: rng.integers(
        0, 256, (value.shape[0], value.shape[1] // block * size), dtype=np.uint8))
    # (gguf-py cannot read Q8_K back; the weights as stored are not needed here)
    monkeypatch.setattr(gguf.quants, "dequantize", lambda data, qtype: np.zeros(
        data.size // size * block, np.float32))
    path = tmp_path / f"tiny-{missing.name}.gguf"
    with np.errstate(invalid="ignore", over="ignore"):  # (random scales read back by gguf-py: NaNs are fine)
        write_tiny_llama(path, dataclasses.replace(KQUANTIZABLE, weight_type=missing.name))
    name = _core.type_info(int(missing))["name"]   # the core's spelling (q8_K)

    assert main(["info", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["supported"] is False and info["architecture_supported"] is True
    assert info["unsupported_types"] == [name]
    assert main(["info", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{name}: 15 tensors" in out and "(no kernels for this type in this version)" in out
    assert f"runs here no: no kernels for {name}" in out

    proc = run_cli("run", str(path), "-p", "hi", "-n", "1")
    assert_clean_error(proc, f"has type {name}, which this version cannot compute with yet")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_run_caps_threads_above_the_cpus_with_a_note(tiny_model_file):
    from edgeinfer.threads import usable_cpus
    proc = run_cli("run", str(tiny_model_file), "-p", "hi", "-n", "2", "--temp", "0", "-c", "32", "-t", "1000")
    assert proc.returncode == 0, proc.stderr
    cap = usable_cpus()
    assert f"note: 1000 threads requested, but this process can run on {cap} logical CPU" in proc.stderr
    assert f"; using {cap} (more threads than CPUs" in proc.stderr
    assert "Traceback" not in proc.stderr and "UserWarning" not in proc.stderr


def test_run_n_minus_one_generates_until_the_end_of_the_context_as_llama_cpp(tiny_model_file, capsys):
    assert main(["run", str(tiny_model_file), "-p", "hello there", "-n", "-1", "--temp", "0", "-c", "256",
                 "-t", "1"]) == 0
    stats = capsys.readouterr().err
    assert "finish: length" in stats
    generated = int(stats.split("generated ")[1].split()[0])
    assert generated > 128   # beyond -n's default: no limit but the context's 256 tokens
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "-p", "x", "-n", "-2"])


def test_errors_from_the_model_are_one_line(fake_model_file, monkeypatch, capsys):
    from edgeinfer.errors import ModelFormatError

    def broken(*args, **kwargs):
        raise ModelFormatError("fake.gguf: bad magic")

    monkeypatch.setattr(FakeModel, "load", broken)
    assert main(["run", str(fake_model_file), "-p", "hi"]) == 1
    assert capsys.readouterr().err.strip() == "error: fake.gguf: bad magic"


# -- the real thing --------------------------------------------------------------------------

@pytest.mark.realmodel
def test_run_smollm2_greedy(smollm2_path):
    proc = run_cli("run", str(smollm2_path), "-p", "The capital of France is", "-n", "8",
                   "--temp", "0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() and "tok/s" in proc.stderr


@pytest.mark.realmodel
def test_info_gemma3(gemma3_path):
    """info reads metadata only, so it works before the architecture is supported."""
    proc = run_cli("info", str(gemma3_path), "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["architecture"] == "gemma3" and info["chat_template"] is False
    assert info["tokenizer"]["vocab_size"] == 262144
