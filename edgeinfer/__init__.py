"""edgeinfer: local LLM inference for desktops and edge devices.

    >>> from edgeinfer import Model
    >>> model = Model.load("SmolLM2-135M-Instruct.Q4_1.gguf")
"""
from edgeinfer.errors import ContextOverflowError, EdgeInferError, ModelFormatError
from edgeinfer.model import Model

__version__ = "0.1.0"

__all__ = ["Model", "EdgeInferError", "ModelFormatError", "ContextOverflowError", "__version__"]
