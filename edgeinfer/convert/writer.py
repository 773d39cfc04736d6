"""The GGUF file a conversion writes: gguf-py's GGUFWriter on a temporary file next to the
output, renamed over it only when every tensor is in (Ctrl-C or an error deletes it), with tensor
data streamed one tensor at a time in the order the infos were declared."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter


class StreamedGGUF:
    def __init__(self, path: str | Path, arch: str):
        self.path = Path(path)
        self.tmp_path = self.path.with_name(f".{self.path.name}.{os.getpid()}.partial")
        self.writer = GGUFWriter(self.tmp_path, arch)
        self._started = False

    def add_tensor_info(self, name: str, ne: list[int], qtype: GGMLQuantizationType, nbytes: int) -> None:
        """ne: GGUF dimension order (ne[0] is the row length)."""
        rows = int(np.prod(ne[1:], dtype=np.int64)) if len(ne) > 1 else 1
        byte_shape = (*reversed(ne[1:]), nbytes // rows)  # numpy order, last dim in bytes
        self.writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes, raw_dtype=qtype)

    def start_data(self) -> None:
        """Writes header, metadata and tensor infos; tensors follow through write_tensor."""
        self.writer.write_header_to_file()
        self.writer.write_kv_data_to_file()
        self.writer.write_ti_data_to_file()
        self._started = True

    def write_tensor(self, data: np.ndarray) -> None:
        self.writer.write_tensor_data(np.ascontiguousarray(data).view(np.uint8).reshape(-1))

    def commit(self) -> None:
        self.writer.close()
        os.replace(self.tmp_path, self.path)

    def abort(self) -> None:
        try:
            self.writer.close()
        finally:
            try:
                os.unlink(self.tmp_path)
            except FileNotFoundError:
                pass

    def __enter__(self) -> "StreamedGGUF":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
