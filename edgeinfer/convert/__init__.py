"""Hugging Face checkpoint -> GGUF (``edgeinfer convert``): checkpoint.py reads safetensors and the
configs, vocab.py / pretokenizer.py the tokenizer, architectures.py picks the family whose class
(base.py the llama family's, decoders.py, encoders.py; RoPE settings in rope.py) names and
transforms tensors, writer.py streams the GGUF file, run.py puts them together."""
from edgeinfer.convert.run import OUTTYPES, ConvertResult, convert_checkpoint

__all__ = ["OUTTYPES", "ConvertResult", "convert_checkpoint"]
