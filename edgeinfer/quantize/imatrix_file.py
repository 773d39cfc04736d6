"""Importance matrix files: what `edgeinfer imatrix` writes and `edgeinfer quantize --imatrix` reads.

For every weight matrix of a model, an importance matrix holds the sum over a calibration text of
each input column's square, and the number of input rows summed. The quantizers weigh each
column's rounding error by the mean square (sum / rows): columns that carry large activations are
rounded more carefully. This is llama.cpp's imatrix, in its files:

- GGUF (llama-imatrix's default): `general.type` = "imatrix", `imatrix.datasets`,
  `imatrix.chunk_count`, `imatrix.chunk_size`, and per weight NAME three F32 tensors:
  `NAME.in_sum2` [cols, n_mat] (sums of squares), `NAME.counts` [1, n_mat] (rows), `NAME.in_sum`
  [cols, n_mat] (sums); n_mat is 1 except for stacked expert weights.
- The legacy `.dat` format (`--output-format dat`): per weight the mean square times the number of
  chunks, then the chunk count and the dataset's name.

Both are read and both written, so files move between edgeinfer and llama.cpp either way.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgeinfer import _core
from edgeinfer.errors import EdgeInferError
from edgeinfer.output_file import PartialFile
from edgeinfer.quantize.writer import GGUFOutput, OutTensor, RawKV, string_array_kv, string_kv, uint32_kv

FORMATS = ("gguf", "dat")
_F32 = 0   # ggml type id


@dataclass
class ImatrixEntry:
    sum2: np.ndarray                 # [n_mat][cols] float32: sums of squared inputs
    counts: np.ndarray               # [n_mat] int64: rows summed into each matrix
    sum: np.ndarray | None = None    # [n_mat][cols] float32: sums of inputs (GGUF files only)


@dataclass
class ImportanceMatrix:
    entries: dict[str, ImatrixEntry] = field(default_factory=dict)
    datasets: list[str] = field(default_factory=list)
    chunk_count: int = 0
    chunk_size: int = 0

    def weights(self, name: str) -> np.ndarray | None:
        """The importance weights of tensor `name` as llama-quantize derives them: the mean square
        of each column, [n_mat * cols] float32 (ones for a matrix that saw no rows); None if the
        file has no entry for it."""
        e = self.entries.get(name)
        if e is None:
            return None
        counts = e.counts.astype(np.float32)[:, None]
        safe = np.where(counts > 0, counts, np.float32(1))
        w = np.where(counts > 0, e.sum2 / safe, np.float32(1))
        return w.astype(np.float32).reshape(-1)


def save(im: ImportanceMatrix, path: str | Path, fmt: str = "gguf") -> None:
    """Writes `im` as llama-imatrix would (its tensor and key order), to a temporary file renamed
    over `path` when complete."""
    if fmt not in FORMATS:
        raise EdgeInferError(f"unknown imatrix format {fmt!r}; one of: {', '.join(FORMATS)}")
    if not im.entries:
        raise EdgeInferError("the importance matrix is empty: no matmul saw any input")
    if fmt == "dat":
        _save_dat(im, path)
        return
    metadata = [string_kv("general.type", "imatrix"), string_array_kv("imatrix.datasets", im.datasets),
                uint32_kv("imatrix.chunk_count", im.chunk_count), uint32_kv("imatrix.chunk_size", im.chunk_size)]
    tensors: list[tuple[OutTensor, np.ndarray]] = []
    for name in sorted(im.entries):
        e = im.entries[name]
        n_mat, cols = e.sum2.shape
        parts = [(f"{name}.in_sum2", [cols, n_mat], e.sum2), (f"{name}.counts", [1, n_mat], e.counts[:, None])]
        if e.sum is not None:
            parts.append((f"{name}.in_sum", [cols, n_mat], e.sum))
        for tname, shape, data in parts:
            arr = np.ascontiguousarray(data, dtype=np.float32)
            tensors.append((OutTensor(tname, shape, _F32, arr.nbytes), arr))
    with GGUFOutput(path, metadata, [t for t, _ in tensors]) as out:
        for _, arr in tensors:
            out.write_tensor_data(memoryview(arr).cast("B"))
        out.commit()


def _save_dat(im: ImportanceMatrix, path: str | Path) -> None:
    # llama-imatrix's legacy layout: each entry's mean squares scaled by its number of chunks
    # (float32 arithmetic, as it computes them); entries that saw no rows at all are left out.
    chunk_size = im.chunk_size or 1
    body = bytearray()
    names = [n for n in sorted(im.entries) if im.entries[n].counts.any()]
    body += struct.pack("<i", len(names))
    for name in names:
        e = im.entries[name]
        raw = name.encode()
        ncall = (int(e.counts.max()) + chunk_size - 1) // chunk_size
        count = e.counts.astype(np.float32)[:, None]
        values = np.where(count > 0, e.sum2, np.float32(1))
        count = np.where(count > 0, count, np.float32(1))
        scaled = (values.astype(np.float32) / count) * np.float32(ncall)
        body += struct.pack("<i", len(raw)) + raw + struct.pack("<ii", ncall, scaled.size)
        body += scaled.astype("<f4").tobytes()
    dataset = (im.datasets[-1] if im.datasets else "").encode()
    body += struct.pack("<ii", im.chunk_count, len(dataset)) + dataset
    partial = PartialFile(path)
    try:
        with partial.errors(), open(partial.tmp_path, "wb") as f:
            f.write(body)
        partial.publish()
    except BaseException:
        partial.discard()
        raise


def load(path: str | Path) -> ImportanceMatrix:
    """Reads an importance matrix file of either format. Raises EdgeInferError naming the problem
    for a file that is not one, is truncated, or holds non-finite values."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise EdgeInferError(f"cannot read the importance matrix {path}: {exc.strerror or exc}") from None
    im = _load_gguf(path) if magic == b"GGUF" else _load_dat(path)
    if not im.entries:
        raise EdgeInferError(f"{path}: the importance matrix has no entries")
    for name, e in im.entries.items():
        if not np.isfinite(e.sum2).all():
            raise EdgeInferError(f"{path}: the importance matrix has non-finite values for {name}")
    return im


def _load_gguf(path: Path) -> ImportanceMatrix:
    try:
        f = _core.GgufFile(str(path))
    except EdgeInferError as exc:
        raise EdgeInferError(f"{path}: not a readable importance matrix ({exc})") from None
    if f.get_string("general.type", "") not in ("imatrix", ""):
        raise EdgeInferError(f"{path}: a GGUF file of type {f.get_string('general.type', '')!r}, "
                             "not an importance matrix")
    for key in ("imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size"):
        if key not in f:
            # llama-quantize refuses these too: without them a file cannot say what it was made from.
            raise EdgeInferError(f"{path}: not an importance matrix (no {key})")
    infos = {t["name"]: t for t in f.tensors()}

    def floats(name: str) -> np.ndarray:
        t = infos[name]
        if t["type"] != _F32:
            raise EdgeInferError(f"{path}: {name} is {t['type_name']}, not F32")
        shape = [int(x) for x in t["shape"]] + [1]
        return np.frombuffer(f.tensor_data(name), dtype="<f4").reshape(shape[1], shape[0]).copy()

    im = ImportanceMatrix(datasets=list(f.get_string_array("imatrix.datasets")),
                          chunk_count=int(f.get_int("imatrix.chunk_count", 0)),
                          chunk_size=int(f.get_int("imatrix.chunk_size", 0)))
    for tname in infos:
        if not tname.endswith(".in_sum2"):
            continue
        name = tname[:-len(".in_sum2")]
        if f"{name}.counts" not in infos:
            raise EdgeInferError(f"{path}: {name} has sums of squares but no counts")
        sum2, counts = floats(tname), floats(f"{name}.counts").reshape(-1)
        if counts.size != sum2.shape[0]:
            raise EdgeInferError(f"{path}: {name} has {sum2.shape[0]} matrices of sums but {counts.size} counts")
        s = floats(f"{name}.in_sum") if f"{name}.in_sum" in infos else None
        if s is not None and s.shape != sum2.shape:
            raise EdgeInferError(f"{path}: {name}'s sums and sums of squares differ in size")
        # lround, as llama.cpp reads them (counts are whole numbers in any file it writes).
        im.entries[name] = ImatrixEntry(sum2, np.floor(counts + 0.5).astype(np.int64), s)
    return im


def _load_dat(path: Path) -> ImportanceMatrix:
    data = path.read_bytes()
    pos = 0

    def take(fmt: str) -> tuple:
        nonlocal pos
        size = struct.calcsize(fmt)
        if pos + size > len(data):
            raise EdgeInferError(f"{path}: not an importance matrix (truncated at byte {pos})")
        out = struct.unpack_from(fmt, data, pos)
        pos += size
        return out

    (n_entries,) = take("<i")
    if n_entries < 1 or n_entries > 1_000_000:
        raise EdgeInferError(f"{path}: not an importance matrix (GGUF or llama.cpp's .dat)")
    im = ImportanceMatrix()
    for _ in range(n_entries):
        (length,) = take("<i")
        if not 0 < length < 4096:
            raise EdgeInferError(f"{path}: not an importance matrix (bad name length {length})")
        name = bytes(take(f"<{length}s")[0]).decode("utf-8", "replace")
        ncall, nval = take("<ii")
        if nval < 1 or pos + 4 * nval > len(data):
            raise EdgeInferError(f"{path}: not an importance matrix (entry {name} truncated)")
        values = np.frombuffer(data, dtype="<f4", count=nval, offset=pos).copy()
        pos += 4 * nval
        # Stored as (mean square) * ncall; keeping ncall as the count makes weights() the mean.
        im.entries[name] = ImatrixEntry(values[None, :], np.array([max(ncall, 0)], dtype=np.int64))
        if ncall <= 0:
            im.entries[name].counts[0] = 1
    if pos + 4 <= len(data):   # the chunk count and the dataset's name are optional
        (im.chunk_count,) = take("<i")
        if pos + 4 <= len(data):
            (length,) = take("<i")
            if 0 < length <= len(data) - pos:
                im.datasets.append(bytes(take(f"<{length}s")[0]).decode("utf-8", "replace"))
    return im


def imatrix_metadata(im: ImportanceMatrix, path: str | Path | None, n_entries: int) -> list[RawKV]:
    """The keys llama-quantize adds to a file quantized with an importance matrix (its strings cut
    to 127 bytes, as it stores them)."""
    def cut(s: str) -> str:
        return s.encode()[:127].decode("utf-8", "ignore")

    out = [string_kv("quantize.imatrix.file", cut(str(path or "")))]
    if im.datasets:
        out.append(string_kv("quantize.imatrix.dataset", cut(im.datasets[0])))
    out.append(uint32_kv("quantize.imatrix.entries_count", n_entries))
    if im.chunk_count > 0:
        out.append(uint32_kv("quantize.imatrix.chunks_count", im.chunk_count))
    return out
