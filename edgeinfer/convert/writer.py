"""The GGUF file a conversion writes: gguf-py's GGUFWriter on a temporary file next to the
output, renamed over it only when every tensor is in (Ctrl-C or an error deletes it), with tensor
data streamed one tensor at a time in the order the infos were declared (edgeinfer.output_file)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

from edgeinfer.output_file import PartialFile


class StreamedGGUF:
    def __init__(self, path: str | Path, arch: str):
        self._partial = PartialFile(path)
        self.path = self._partial.path
        self.writer = GGUFWriter(self._partial.tmp_path, arch)
        self._started = False

    def add_tensor_info(self, name: str, ne: list[int], qtype: GGMLQuantizationType, nbytes: int) -> None:
        """ne: GGUF dimension order (ne[0] is the row length)."""
        rows = int(np.prod(ne[1:], dtype=np.int64)) if len(ne) > 1 else 1
        byte_shape = (*reversed(ne[1:]), nbytes // rows)  # numpy order, last dim in bytes
        self.writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes, raw_dtype=qtype)

    def start_data(self) -> None:
        """Writes header, metadata and tensor infos; tensors follow through write_tensor."""
        with self._partial.errors():
            self.writer.write_header_to_file()
            self.writer.write_kv_data_to_file()
            self.writer.write_ti_data_to_file()
        self._started = True

    def write_tensor(self, data: np.ndarray) -> None:
        with self._partial.errors():
            self.writer.write_tensor_data(np.ascontiguousarray(data).view(np.uint8).reshape(-1))

    def commit(self) -> None:
        with self._partial.errors():
            self.writer.close()
        self._partial.publish()

    def abort(self) -> None:
        try:
            self.writer.close()
        except OSError:
            pass  # the data is thrown away: a failed flush must not hide the error that got us here
        finally:
            self._partial.discard()

    def __enter__(self) -> "StreamedGGUF":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
