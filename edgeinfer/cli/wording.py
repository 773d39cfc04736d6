"""The library's messages in the command line's words: a setting the library names by its
`Model.load` keyword (``gpu_layers='auto'``) is named by the flag that sets it here
(``--gpu-layers auto``); see edgeinfer/wording.py."""
from __future__ import annotations

from edgeinfer.wording import DEVICE_LIST, Ref, spelled

# Model.load keyword -> the flag that sets it (edgeinfer/cli/args.py).
FLAGS = {"gpu_layers": "--gpu-layers", "device": "--device", "require_gpu": "--require-gpu", "n_ctx": "-c",
         "force": "--force", "n_chunks": "--chunks", "tensor_types": "--tensor-type", "n_parallel": "--parallel",
         "truncate": "--truncate"}


def flag_spelling(ref: Ref) -> str:
    """A ref as this command line writes it: the flag, and its value if it takes one."""
    if ref == DEVICE_LIST:
        return "`edgeinfer devices`"
    flag = FLAGS[ref.name]
    return flag if ref.value is None or ref.value is True else f"{flag} {ref.value}"


def in_flags(text: object) -> str:
    """`text` (an error, a warning or a message from the library) as the command line says it."""
    return spelled(text, flag_spelling)
