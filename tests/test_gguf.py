"""The native GGUF reader (_core.GgufFile): round-trips files written by the `gguf` package, and
rejects malformed ones with a ModelFormatError that names the file, the field and the problem."""
from __future__ import annotations

import gc
import time
from pathlib import Path

import gguf
import numpy as np
import pytest

from edgeinfer import _core
from support.gguf_fields import field_locations, with_u
from support.gguf_sample import QT, SAMPLE_KV, VT, SampleTensor, expected_value, sample_tensors, write_gguf

GgufFile = _core.GgufFile
ModelFormatError = _core.ModelFormatError


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "sample.gguf"
    write_gguf(path)
    return path


@pytest.fixture(scope="module")
def sample_bytes(sample) -> bytes:
    return sample.read_bytes()


@pytest.fixture(scope="module")
def locs(sample) -> dict[str, object]:
    return {loc.label: loc for loc in field_locations(sample)}


# ---- valid files ---------------------------------------------------------------------------------

def test_header_properties(sample):
    f = GgufFile(str(sample))
    assert f.path == str(sample)
    assert f.version == 3
    assert f.alignment == 32
    assert f.data_offset % 32 == 0
    assert f.file_size == sample.stat().st_size


def test_metadata_round_trips_every_value_type(sample):
    f = GgufFile(str(sample))
    meta = f.metadata()
    assert meta["general.architecture"] == "test"
    for key, (value, vtype, _) in SAMPLE_KV.items():
        want = expected_value(value, vtype)
        assert meta[key] == want, key
        assert type(meta[key]) is type(want), key  # bool stays bool, ints stay int
        assert f.get(key) == want, key


def test_keys_are_in_file_order(sample):
    reader = gguf.GGUFReader(str(sample))
    want = [k for k in reader.fields if not k.startswith("GGUF.")]
    assert GgufFile(str(sample)).keys() == want


def test_get_returns_default_for_absent_key(sample):
    f = GgufFile(str(sample))
    assert f.get("no.such.key") is None
    assert f.get("no.such.key", 7) == 7
    assert "test.u8" in f and "no.such.key" not in f


def test_tensors_match_gguf_reader(sample):
    f = GgufFile(str(sample))
    reader = gguf.GGUFReader(str(sample))
    ours = f.tensors()
    assert [t["name"] for t in ours] == [t.name for t in reader.tensors]
    for mine, theirs, written in zip(ours, reader.tensors, sample_tensors()):
        assert mine["type"] == int(theirs.tensor_type) == written.type
        assert mine["type_name"] == QT(written.type).name.lower().replace("_k", "_K")
        assert mine["shape"] == [int(x) for x in theirs.shape] == written.ne
        assert f.data_offset + mine["offset"] == theirs.data_offset
        assert mine["nbytes"] == theirs.n_bytes == written.nbytes
        assert f.tensor_data(mine["name"]).tobytes() == written.data == theirs.data.tobytes()


def test_tensor_data_is_a_read_only_view_that_keeps_the_file_alive(sample):
    f = GgufFile(str(sample))
    data = f.tensor_data("output.weight")
    assert data.dtype == np.uint8 and not data.flags.writeable and not data.flags.owndata
    with pytest.raises(ValueError):
        data[0] = 1
    want = data.tobytes()
    del f
    gc.collect()
    assert data.tobytes() == want  # the mapping is still there
    with pytest.raises(KeyError):
        GgufFile(str(sample)).tensor_data("missing")


def test_custom_alignment_places_data_and_offsets_on_it(tmp_path):
    path = tmp_path / "a64.gguf"
    write_gguf(path, alignment=64)
    f = GgufFile(str(path))
    assert f.alignment == 64 and f.data_offset % 64 == 0
    assert all(t["offset"] % 64 == 0 for t in f.tensors())
    for t, written in zip(f.tensors(), sample_tensors()):
        assert f.tensor_data(t["name"]).tobytes() == written.data


def test_version_2_is_read(sample_bytes, tmp_path):
    path = tmp_path / "v2.gguf"
    path.write_bytes(with_u(sample_bytes, 4, 4, 2))
    assert GgufFile(str(path)).version == 2


def test_typed_getters(sample):
    f = GgufFile(str(sample))
    assert f.get_int("test.u32") == 4_000_000_000
    assert f.get_int("test.u64_small") == 12345
    assert f.get_int("test.i64") == -(2**62)
    assert f.get_int("absent", 5) == 5
    assert f.get_float("test.f64", 0.0) == pytest.approx(3.141592653589793)
    assert f.get_float("test.u8", 0.0) == 200.0
    assert f.get_bool("test.bool_true", False) is True
    assert f.get_string("test.str") == "héllo ✓ world"
    assert f.get_string("absent", "x") == "x"
    assert f.get_string_array("test.arr_str") == ["<s>", "</s>", "", "▁hello", "日本"]
    assert f.get_int_array("test.arr_u8") == [0, 1, 255]
    assert f.get_float_array("test.arr_f32") == [0.5, -1.25, 3.0]
    assert f.array_size("test.arr_str") == 5 and f.array_size("absent") == -1


@pytest.mark.parametrize("call, message", [
    (lambda f: f.get_int("test.str"), "key 'test.str': has type string, expected an integer"),
    (lambda f: f.get_int("test.bool_true"), "has type bool, expected an integer"),
    (lambda f: f.get_int("test.u64"), "does not fit a signed 64-bit integer"),
    (lambda f: f.get_int("absent"), "key 'absent': required key is missing"),
    (lambda f: f.get_string("test.u8"), "has type uint8, expected a string"),
    (lambda f: f.get_bool("test.u8", True), "has type uint8, expected a bool"),
    (lambda f: f.get_float("test.str", 0.0), "expected a number"),
    (lambda f: f.get_string_array("test.arr_i32"), "has type array of int32, expected an array of string"),
    (lambda f: f.get_int_array("test.arr_u64"), "element 1 does not fit a 32-bit integer"),
    (lambda f: f.get_float_array("test.arr_i32"), "expected an array of float32"),
    (lambda f: f.array_size("test.u8"), "expected an array"),
])
def test_typed_getters_reject_wrong_types(sample, call, message):
    with pytest.raises(ModelFormatError, match=message):
        call(GgufFile(str(sample)))


# ---- files that cannot be opened ------------------------------------------------------------------

def test_missing_file_is_an_edgeinfer_error(tmp_path):
    path = tmp_path / "nope.gguf"
    with pytest.raises(_core.EdgeInferError, match="nope.gguf: cannot open") as info:
        GgufFile(str(path))
    assert not isinstance(info.value, ModelFormatError)


def test_directory_is_an_edgeinfer_error(tmp_path):
    with pytest.raises(_core.EdgeInferError, match="is a directory"):
        GgufFile(str(tmp_path))


def test_empty_file_is_a_format_error(tmp_path):
    path = tmp_path / "empty.gguf"
    path.write_bytes(b"")
    with pytest.raises(ModelFormatError, match="empty"):
        GgufFile(str(path))


# ---- malformed files: each rejected with a message naming the field -------------------------------

def _open_bytes(tmp_path, data: bytes):
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    return GgufFile(str(path))


def _patch(data: bytes, locs, label: str, value: int) -> bytes:
    loc = locs[label]
    return with_u(data, loc.offset, loc.size, value)


# label of a field (see support.gguf_fields.field_locations), new value, expected message fragment
MUTATIONS = [
    ("kv 'GGUF.version' part 0.0", 1, "GGUF version 1 is not supported"),
    ("kv 'GGUF.version' part 0.0", 4, "GGUF version 4 is not supported"),
    ("kv 'GGUF.tensor_count' part 0.0", 2**63, "header: n_tensors is 9223372036854775808"),
    ("kv 'GGUF.tensor_count' part 0.0", 6, "tensor #5"),
    ("kv 'GGUF.kv_count' part 0.0", 2**64 - 1, "header: n_kv is 18446744073709551615"),
    ("kv 'test.u8' part 0.0", 2**64 - 1, "key #.*: key length 18446744073709551615 exceeds the limit"),
    ("kv 'test.u8' part 0.0", 0, "empty key"),
    ("kv 'test.u8' part 2.0", 13, "key 'test.u8': value type 13 is not a GGUF value type"),
    ("kv 'test.bool_true' part 3.0", 2, "key 'test.bool_true': bool value is 2, expected 0 or 1"),
    ("kv 'test.str' part 3.0", 2**63, "key 'test.str': string value length 9223372036854775808 runs past"),
    ("kv 'test.arr_str' part 4.0", 0xFFFFFFFF, "key 'test.arr_str': array of 4294967295 strings cannot fit"),
    ("kv 'test.arr_str' part 5.0", 2**40, "key 'test.arr_str': string array element 0 has length"),
    ("kv 'test.arr_i32' part 4.0", 2**62, "key 'test.arr_i32': array of 4611686018427387904 int32 elements"),
    ("kv 'test.arr_u8' part 3.0", 9, "key 'test.arr_u8': arrays of arrays are not supported"),
    ("kv 'test.arr_u8' part 3.0", 99, "array element type 99 is not a GGUF value type"),
    ("kv 'test.arr_bool' part 6.0", 7, "key 'test.arr_bool': bool array element 1 is 7"),
    ("tensor 'tok_embd.weight' part 0.0", 2**64 - 1, "tensor #0: name length .* exceeds the limit"),
    ("tensor 'tok_embd.weight' part 2.0", 5, "tensor 'tok_embd.weight': n_dims is 5, expected 1..4"),
    ("tensor 'tok_embd.weight' part 2.0", 0, "n_dims is 0"),
    ("tensor 'tok_embd.weight' part 3.0", 63, "row length ne\\[0\\]=63 is not a multiple of the block size 32 of type q8_0"),
    ("tensor 'tok_embd.weight' part 3.1", 2**63, "dimension 1 is 9223372036854775808, larger than"),
    ("tensor 'output.weight' part 3.1", 2**62, "tensor 'output.weight': element count overflows"),
    ("tensor 'blk.0.attn_norm.weight' part 3.0", 2**62, "tensor 'blk.0.attn_norm.weight': byte size overflows"),
    ("tensor 'output.weight' part 4.0", 4, "tensor 'output.weight': unknown tensor type 4"),
    ("tensor 'output.weight' part 4.0", 2**31, "unknown tensor type 2147483648"),
    ("tensor 'output.weight' part 5.0", 33, "tensor 'output.weight': offset 33 is not a multiple of the alignment 32"),
    ("tensor 'output.weight' part 5.0", 2**63, "tensor 'output.weight': offset 9223372036854775808 \\+ 512 bytes runs past the end"),
    ("tensor 'output.weight' part 3.1", 2**20, "tensor 'output.weight': offset \\d+ \\+ \\d+ bytes runs past the end of the file"),
]


@pytest.mark.parametrize("label, value, message", MUTATIONS, ids=[f"{m[0]}={m[1]}" for m in MUTATIONS])
def test_mutated_field_is_rejected_with_a_clear_message(tmp_path, sample, sample_bytes, locs, label, value, message):
    with pytest.raises(ModelFormatError, match=message) as info:
        _open_bytes(tmp_path, _patch(sample_bytes, locs, label, value))
    assert str(info.value).startswith(str(tmp_path / "bad.gguf") + ": ")


def test_bad_magic(tmp_path, sample_bytes):
    with pytest.raises(ModelFormatError, match="not a GGUF file"):
        _open_bytes(tmp_path, b"GGML" + sample_bytes[4:])


def test_big_endian_file_is_rejected(tmp_path):
    path = tmp_path / "be.gguf"
    write_gguf(path, endianess=gguf.GGUFEndian.BIG)
    with pytest.raises(ModelFormatError, match="big-endian GGUF files are not supported"):
        GgufFile(str(path))


def test_truncated_tensor_data_names_the_tensor(tmp_path, sample_bytes):
    with pytest.raises(ModelFormatError, match="tensor 'output.weight': offset .* runs past the end of the file"):
        _open_bytes(tmp_path, sample_bytes[:-1])


def test_truncated_header(tmp_path, sample_bytes):
    with pytest.raises(ModelFormatError, match="header: n_kv: needs 8 bytes"):
        _open_bytes(tmp_path, sample_bytes[:20])


@pytest.mark.parametrize("value, message", [
    (48, "alignment 48 is not a power of two"),
    (0, "alignment 0 is not a power of two"),
    (2**31, None),  # a power of two: valid, but then every tensor lands past the end
])
def test_alignment_must_be_a_power_of_two(tmp_path, value, message):
    path = tmp_path / "align.gguf"
    write_gguf(path, alignment=64)
    loc = {l.label: l for l in field_locations(path)}["kv 'general.alignment' part 3.0"]
    data = with_u(path.read_bytes(), loc.offset, 4, value)
    with pytest.raises(ModelFormatError, match=message or "runs past the end of the file"):
        _open_bytes(tmp_path, data)


def test_alignment_of_the_wrong_type(tmp_path):
    path = tmp_path / "align_str.gguf"
    write_gguf(path, kv={"general.alignment": ("64", VT.STRING, None)})
    with pytest.raises(ModelFormatError, match="key 'general.alignment': has type string, expected an integer"):
        GgufFile(str(path))


def test_duplicate_key(tmp_path, sample_bytes):
    assert sample_bytes.count(b"test.i8") == 1
    with pytest.raises(ModelFormatError, match="key 'test.u8': duplicate key"):
        _open_bytes(tmp_path, sample_bytes.replace(b"test.i8", b"test.u8"))


def test_duplicate_tensor_name(tmp_path):
    path = tmp_path / "dup.gguf"
    tensors = [SampleTensor("tensor_aa", int(QT.F32), [8], bytes(32)),
               SampleTensor("tensor_bb", int(QT.F32), [8], bytes(32))]
    write_gguf(path, kv={}, tensors=tensors)
    data = path.read_bytes()
    with pytest.raises(ModelFormatError, match="tensor 'tensor_aa': duplicate tensor name"):
        _open_bytes(tmp_path, data.replace(b"tensor_bb", b"tensor_aa"))


def test_zero_sized_tensor_is_allowed(tmp_path):
    path = tmp_path / "zero.gguf"
    write_gguf(path, kv={}, tensors=[SampleTensor("w", int(QT.F32), [8], bytes(32))])
    data = path.read_bytes()
    loc = {l.label: l for l in field_locations(path)}["tensor 'w' part 3.0"]
    f = _open_bytes(tmp_path, with_u(data, loc.offset, 8, 0))
    assert f.tensors()[0]["shape"] == [0] and f.tensors()[0]["nbytes"] == 0
    assert f.tensor_data("w").size == 0


# ---- real models ---------------------------------------------------------------------------------

def _best_open_time(path: Path, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        GgufFile(str(path))
        best = min(best, time.perf_counter() - t0)
    return best


@pytest.mark.realmodel
def test_smollm2_matches_gguf_reader(smollm2_path):
    path = smollm2_path
    assert _best_open_time(path) < 0.1
    f = GgufFile(str(path))
    reader = gguf.GGUFReader(str(path))
    meta = f.metadata()
    for name, field in reader.fields.items():
        if not name.startswith("GGUF."):
            want = field.contents()
            if isinstance(want, float):
                assert meta[name] == pytest.approx(want), name
            else:
                assert meta[name] == want, name
    for mine, theirs in zip(f.tensors(), reader.tensors, strict=True):
        assert (mine["name"], mine["type"], mine["shape"], mine["nbytes"]) == (
            theirs.name, int(theirs.tensor_type), [int(x) for x in theirs.shape], theirs.n_bytes)
        assert f.data_offset + mine["offset"] == theirs.data_offset
    assert f.get_string("general.architecture") == "llama"
    assert f.array_size("tokenizer.ggml.tokens") == f.get_int("llama.vocab_size")


@pytest.mark.realmodel
def test_gemma3_opens_fast(gemma3_path):
    path = gemma3_path
    assert _best_open_time(path) < 0.1
    f = GgufFile(str(path))
    assert f.get_string("general.architecture") == "gemma3"
    n = f.array_size("tokenizer.ggml.tokens")
    assert n == f.array_size("tokenizer.ggml.scores") == f.array_size("tokenizer.ggml.token_type") > 200_000
    assert len(f.get_string_array("tokenizer.ggml.tokens")) == n


def test_non_utf8_key_is_rejected_with_an_escaped_name(tmp_path, sample_bytes):
    # The message becomes a Python str, so the bad byte must be escaped, not copied.
    with pytest.raises(ModelFormatError, match=r"key 'test\.\\xff8': key is not valid UTF-8"):
        _open_bytes(tmp_path, sample_bytes.replace(b"test.u8", b"test.\xff8"))


def test_non_utf8_tensor_name_is_rejected(tmp_path, sample_bytes):
    with pytest.raises(ModelFormatError, match=r"tensor 'output\.weigh\\x80': tensor name is not valid UTF-8"):
        _open_bytes(tmp_path, sample_bytes.replace(b"output.weight", b"output.weigh\x80"))
