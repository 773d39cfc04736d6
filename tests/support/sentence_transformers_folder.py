"""The sentence-transformers layout around a Hugging Face checkpoint folder, as the embedding
models ship it: modules.json naming the modules in order, 1_Pooling/config.json, and optional
Dense modules (N_Dense/config.json + model.safetensors holding linear.weight), then Normalize."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def write_sentence_transformers(folder: Path, hidden: int, pooling: str, dense: list[np.ndarray] = ()) -> None:
    """pooling: "mean", "cls" or "lasttoken"; dense: the Dense modules' weights [out][in], in order
    (no bias, identity activation: EmbeddingGemma's), saved as 2_Dense, 3_Dense, ..."""
    from safetensors.numpy import save_file

    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    (folder / "1_Pooling").mkdir(parents=True, exist_ok=True)
    flags = {"pooling_mode_cls_token": pooling == "cls", "pooling_mode_mean_tokens": pooling == "mean",
             "pooling_mode_lasttoken": pooling == "lasttoken"}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": hidden, **flags}))
    for i, w in enumerate(dense, start=2):
        path = folder / f"{i}_Dense"
        path.mkdir(exist_ok=True)
        save_file({"linear.weight": np.ascontiguousarray(w, dtype=np.float32)}, str(path / "model.safetensors"))
        (path / "config.json").write_text(json.dumps({
            "in_features": int(w.shape[1]), "out_features": int(w.shape[0]), "bias": False,
            "activation_function": "torch.nn.modules.linear.Identity"}))
        modules.append({"idx": i, "name": str(i), "path": path.name, "type": "sentence_transformers.models.Dense"})
    n = len(modules)
    modules.append({"idx": n, "name": str(n), "path": f"{n}_Normalize", "type": "sentence_transformers.models.Normalize"})
    (folder / "modules.json").write_text(json.dumps(modules, indent=2))
