"""Model quantization (``edgeinfer quantize``): llama.cpp's presets, the core's reference
quantizers, a streamed GGUF writer."""
from edgeinfer.quantize.plan import PRESETS, QuantizeOptions, TensorPlan, make_plan, parse_tensor_type, parse_type
from edgeinfer.quantize.run import QuantizeResult, quantize_file

__all__ = ["PRESETS", "QuantizeOptions", "QuantizeResult", "TensorPlan", "make_plan", "parse_tensor_type",
           "parse_type", "quantize_file"]
