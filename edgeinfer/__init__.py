"""edgeinfer: local LLM inference for desktops and edge devices."""
from edgeinfer.errors import ContextOverflowError, EdgeInferError, ModelFormatError

__version__ = "0.1.0"

__all__ = ["EdgeInferError", "ModelFormatError", "ContextOverflowError", "__version__"]
