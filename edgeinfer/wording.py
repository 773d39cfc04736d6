"""Messages that name the reader's own settings.

An error or note (a placement that does not fit, an output file that exists) tells its reader
which setting to change. Someone calling the Python API set it as a keyword argument
(``Model.load(gpu_layers='auto')``, ``quantize_file(..., force=True)``); someone at the command line
as a flag (``--gpu-layers auto``, ``--force``). So such a message is written once, as text and
`Ref`s, and each interface spells the refs its own way: the message *is* the API's wording (a
str, so it prints, compares and joins like one), and ``message.spelled(spell)`` gives another
interface's (the CLI's is edgeinfer/cli/wording.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Ref:
    """A setting the reader can change, with the value it has or could take (None: the setting
    itself), or something the reader can consult (DEVICE_LIST)."""

    name: str
    value: Any = None


Spelling = Callable[[Ref], str]

# Where the Python API lists the device indices `device=` takes.
DEVICE_LIST = Ref("device_list")


def keyword_spelling(ref: Ref) -> str:
    """The Python API's words: `Model.load`'s keyword, with the value as Python writes it."""
    if ref == DEVICE_LIST:
        return "edgeinfer.gpu.devices.list_devices()"
    return ref.name if ref.value is None else f"{ref.name}={ref.value!r}"


class Wording(str):
    """Text naming settings through `Ref`s; as a str, the Python API's wording."""

    parts: tuple[str | Ref, ...]

    def __new__(cls, *parts: str | Ref) -> "Wording":
        self = super().__new__(cls, _join(parts, keyword_spelling))
        self.parts = parts
        return self

    def spelled(self, spell: Spelling) -> str:
        """The same message with every ref spelled by `spell`."""
        return _join(self.parts, spell)


def _join(parts: tuple[str | Ref, ...], spell: Spelling) -> str:
    return "".join(part if isinstance(part, str) else spell(part) for part in parts)


def spelled(text: object, spell: Spelling) -> str:
    """`text` (a message, or an exception or warning carrying one) with its refs spelled by
    `spell`; any other text as str() gives it."""
    if isinstance(text, BaseException) and len(text.args) == 1 and isinstance(text.args[0], Wording):
        text = text.args[0]
    return text.spelled(spell) if isinstance(text, Wording) else str(text)

