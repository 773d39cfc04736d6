"""The exception family of edgeinfer. The classes are defined once, in the native core, which
raises them; they are re-exported here so callers never import the private module."""
from edgeinfer._core import ContextOverflowError, EdgeInferError, ModelFormatError

__all__ = ["EdgeInferError", "ModelFormatError", "ContextOverflowError"]
