"""llama.cpp's Python binding in its own virtual environment, where scripts/bench_compare.py makes
it (the tests that run llama.cpp itself skip without it): found where the script puts it."""
from __future__ import annotations

import glob
import os
import subprocess
from pathlib import Path

from support.paths import load_script

_bench_compare = load_script("bench_compare")
BENCH_VENV: Path = _bench_compare.default_venv()
BENCH_PYTHON: Path = _bench_compare.venv_python(BENCH_VENV)


def has_llama_cpp() -> bool:
    """Whether the venv's interpreter exists and imports llama_cpp."""
    return BENCH_PYTHON.exists() and subprocess.run([str(BENCH_PYTHON), "-c", "import llama_cpp"],
                                                    capture_output=True).returncode == 0


def _ggml_library(name: str) -> Path | None:
    """ggml's `name` (libggml-base.so, libggml-cpu.so): $EDGEINFER_LIBGGML's folder if set, else the
    binding's in the bench venv, else the newest llama.cpp's build (scripts/llamacpp_bin.py)."""
    if "EDGEINFER_LIBGGML" in os.environ:
        patterns = [str(Path(os.environ["EDGEINFER_LIBGGML"]).parent / name)]
    else:
        llamacpp_bin = load_script("llamacpp_bin")
        patterns = [str(BENCH_VENV / "lib" / "python3*" / "site-packages" / "llama_cpp" / "lib" / name),
                    str(llamacpp_bin.default_root() / "*" / "build" / "bin" / name)]
    for pattern in patterns:
        paths = sorted(glob.glob(pattern))
        if paths:
            return Path(paths[-1])
    return None


def libggml_base() -> Path | None:
    """libggml-base.so of a llama.cpp build ($EDGEINFER_LIBGGML names it), or None."""
    return _ggml_library("libggml-base.so")


def libggml_cpu() -> Path | None:
    """libggml-cpu.so beside it (ggml's CPU kernels, built for this machine's CPU), or None."""
    return _ggml_library("libggml-cpu.so")


def llamacpp_tool(name: str) -> Path | None:
    """A tool (llama-quantize, llama-imatrix, ...) of the newest llama.cpp's build made by
    scripts/llamacpp_bin.py, or None where there is none."""
    llamacpp_bin = load_script("llamacpp_bin")
    paths = sorted(glob.glob(str(llamacpp_bin.default_root() / "*" / "build" / "bin" / name)))
    return Path(paths[-1]) if paths else None


def llamacpp_perplexity(tool: Path, args: list[str]) -> float:
    """The "Final estimate" PPL llama-perplexity prints for `args`. Its log is written by a
    background thread that the process does not wait for at exit (llama.cpp's common_log is leaked
    on purpose), so when the CPUs are busy the last lines can be lost (exit code 0, the output cut
    after some chunk). OpenMP's workers spinning after the last pass are what keep that thread
    off the CPU here: they are told to sleep (OMP_WAIT_POLICY=passive), and a run that still lost
    the line is made again, up to three."""
    import os
    import re
    import subprocess

    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    for _ in range(3):
        run = subprocess.run([str(tool), *args], capture_output=True, text=True, timeout=300, env=env)
        assert run.returncode == 0, run.stderr[-2000:]
        found = re.search(r"Final estimate: PPL = ([0-9.]+)", run.stdout + run.stderr)
        if found:
            return float(found.group(1))
    raise AssertionError("llama-perplexity printed no final estimate in three runs:\n" + run.stderr[-2000:])


def llamacpp_converter() -> Path | None:
    """convert_hf_to_gguf.py of the newest llama.cpp source tree scripts/llamacpp_bin.py unpacked
    (beside its gguf-py, which it must import rather than the installed gguf), or None."""
    llamacpp_bin = load_script("llamacpp_bin")
    pattern = llamacpp_bin.default_root() / "*" / "src" / "*" / "*" / "convert_hf_to_gguf.py"
    paths = sorted(p for p in glob.glob(str(pattern)) if (Path(p).parent / "gguf-py" / "gguf").is_dir())
    return Path(paths[-1]) if paths else None


def start_llamacpp_converter(converter: Path, hf_folder: Path, out: Path, outtype: str = "f32",
                             run_as: tuple[str, str] | None = None) -> subprocess.Popen:
    """convert_hf_to_gguf.py of `hf_folder` into `out`, started (mostly importing torch: callers
    run several side by side), importing the converter's own gguf-py first (the installed gguf may
    predate what it writes). Output and errors in .communicate()'s first item. run_as: (a script
    run with `python -c` instead, its first arguments the converter and the extra string) for a
    converter patched before it runs."""
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(converter.parent / "gguf-py"),
                                                         os.environ.get("PYTHONPATH", "")])}
    run = [str(converter)] if run_as is None else ["-c", run_as[0], str(converter), run_as[1]]
    return subprocess.Popen([sys.executable, *run, str(hf_folder), "--outfile", str(out),
                             "--outtype", outtype], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


# llama.cpp's converter names a WordPiece tokenizer's pre-tokenizer by a hash of known models'
# vocabularies; a tiny test one is none of them, so this run_as script for start_llamacpp_converter
# patches the lookup to "default" (what it writes for BERT's): the keys, tensors and vocabulary
# under test are its own.
WORDPIECE_PRE_DEFAULT = """
import importlib, runpy, sys
converter = sys.argv[1]
sys.path.insert(0, converter.rsplit("/", 1)[0])
importlib.import_module("conversion.base").TextModel.get_vocab_base_pre = lambda self, tokenizer: "default"
sys.argv = [converter] + sys.argv[3:]
runpy.run_path(converter, run_name="__main__")
"""


# The same for a config.json that transformers' AutoConfig misreads: a nomic-bert checkpoint's
# (n_embd, n_layer, ...) is read by transformers 5's own NomicBertConfig, which knows only
# hidden_size, num_hidden_layers, ... and fills in nomic-embed-text's sizes; with AutoConfig failing,
# the converter reads config.json itself, as it does with the transformers it was written for.
WORDPIECE_PRE_DEFAULT_RAW_CONFIG = WORDPIECE_PRE_DEFAULT.replace(
    "runpy.run_path", "importlib.import_module('conversion.base').AutoConfig = None\nrunpy.run_path")


def assert_same_encoder_file(theirs: Path, ours: Path, texts: list[str]) -> None:
    """llama.cpp's converted file `theirs` and ours of one encoder: the same tensors and shapes, the
    same values for every key of theirs but general.*, and the same tokens and embedding bytes."""
    from edgeinfer import Model, _core

    a, b = _core.GgufFile(str(theirs)), _core.GgufFile(str(ours))
    assert {t["name"]: t["shape"] for t in a.tensors()} == {t["name"]: t["shape"] for t in b.tensors()}
    meta_a, meta_b = a.metadata(), b.metadata()
    keys = {k for k in meta_a if not k.startswith("general.")}
    assert {k: meta_a[k] for k in keys} == {k: meta_b.get(k) for k in keys}
    t, o = Model.load(theirs, n_ctx=64), Model.load(ours, n_ctx=64)
    assert [t.tokenize(x) for x in texts] == [o.tokenize(x) for x in texts]
    assert t.embed(texts).tobytes() == o.embed(texts).tobytes()


def assert_perplexity_is_llamacpps(path: Path, folder: Path, n_ctx: int = 128) -> None:
    """llama-perplexity scores a text on the GGUF file `path` as edgeinfer does (each chunk a
    fresh sequence in both), within 1e-4; skips without llama-perplexity."""
    import pytest

    from edgeinfer.model import Model
    from edgeinfer.perplexity import perplexity
    from support.hf_tiny import SAMPLE_TEXTS

    tool = llamacpp_tool("llama-perplexity")
    if tool is None:
        pytest.skip("no llama-perplexity (build llama.cpp with scripts/llamacpp_bin.py)")
    text = "\n".join(SAMPLE_TEXTS * 12)
    (folder / "text.txt").write_text(text, encoding="utf-8")
    theirs = llamacpp_perplexity(tool, ["-m", str(path), "-f", str(folder / "text.txt"), "-c", str(n_ctx),
                                        "-b", str(n_ctx), "-t", "2"])
    ours = perplexity(Model.load(path, n_ctx=n_ctx, n_threads=2), text, n_ctx=n_ctx).ppl
    assert abs(ours / theirs - 1) <= 1e-4, (ours, theirs)
