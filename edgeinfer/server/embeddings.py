"""The work of /v1/embeddings, /v1/rerank and Ollama's /api/embed over `Model.embed` /
`Model.rerank`: inputs to token ids (so usage counts and the context check are exact), a 400 with
the numbers for an input over the context unless `truncate`, Matryoshka truncation where the
model was trained for it, and the response bodies. Every input of a request goes to the engine
in one call, which batches them."""
from __future__ import annotations

import base64
from typing import Any, Sequence

import numpy as np

from edgeinfer.server import schemas as s
from edgeinfer.server.errors import APIError
from edgeinfer.server.prompts import check_token_ids

# Embedding models trained so that a prefix of the vector is itself an embedding (Matryoshka
# representation learning), by the name their files carry (general.basename or general.name):
# only theirs may be cut to fewer `dimensions`.
MATRYOSHKA_MODELS = ("embeddinggemma", "qwen3-embedding", "nomic-embed-text-v1.5", "mxbai-embed-large",
                     "snowflake-arctic-embed-m-v1.5", "snowflake-arctic-embed-l-v2.0")


def check_can_embed(model: Any, model_id: str) -> None:
    if not getattr(model, "can_embed", False):
        raise APIError(400, f"The model {model_id!r} is a generative model loaded without embeddings; start the server "
                            f"with --embeddings to embed with its pooled hidden states, or use an embedding model.",
                       param="model", code="embeddings_not_enabled")
    if model.pooling == "none":   # one vector per token: not an embedding of the input (llama.cpp refuses it too)
        raise APIError(400, f"The model {model_id!r} has no pooling (its file names none), so it gives a vector per "
                            f"token rather than one per input; start the server with --pooling mean, last or cls.",
                       param="model", code="embeddings_not_enabled")


def check_can_rerank(model: Any, model_id: str) -> None:
    if not getattr(model, "can_rerank", False):
        raise APIError(400, f"The model {model_id!r} is not a reranker (its pooling is "
                            f"{getattr(model, 'pooling', 'none')!r}, not 'rank'); use a cross-encoder such as "
                            f"bge-reranker.", param="model", code="not_a_reranker")


def input_ids(value: Any, model: Any, field: str = "input") -> list[list[int]]:
    """Each input as token ids, with the model's special tokens as its embed() adds them."""
    if isinstance(value, str):
        value = [value]
    if not value:
        raise APIError(400, f"'{field}' is empty: send a text, texts, or token ids.", param=field, code="invalid_value")
    if all(isinstance(v, int) for v in value):
        value = [value]
    out = []
    for i, item in enumerate(value):
        where = f"{field}.{i}" if len(value) > 1 else field
        if isinstance(item, str):
            if not item:
                raise APIError(400, f"'{where}' is an empty text.", param=where, code="invalid_value")
            out.append(model.tokenize(item, add_special=True))
        else:
            if not item:
                raise APIError(400, f"'{where}' is an empty list of token ids.", param=where, code="invalid_value")
            check_token_ids(item, model.n_vocab, where)
            out.append(list(item))
    return out


def check_lengths(inputs: Sequence[Sequence[int]], n_ctx: int, truncate: bool, field: str = "input") -> int:
    """The tokens the inputs count (cut ones at the context); a 400 naming the first input over
    the context unless `truncate`."""
    for i, ids in enumerate(inputs):
        if len(ids) > n_ctx and not truncate:
            where = f"{field}.{i}" if len(inputs) > 1 else field
            raise APIError(400, f"'{where}' has {len(ids)} tokens, more than this model's context of {n_ctx}; "
                                f"shorten it or send \"truncate\": true to cut it.", param=where,
                           code="context_length_exceeded")
    return sum(min(len(ids), n_ctx) for ids in inputs)


def fewer_dimensions(vectors: np.ndarray, dimensions: int | None, model: Any, normalized: bool) -> np.ndarray:
    width = vectors.shape[1]
    if dimensions is None or dimensions == width:
        return vectors
    if dimensions > width:
        raise APIError(400, f"'dimensions' is {dimensions}, but this model's embeddings have {width}.",
                       param="dimensions", code="invalid_value")
    names = " ".join(str(model.metadata.get(key) or "") for key in ("general.basename", "general.name")).lower()
    if not any(name in names for name in MATRYOSHKA_MODELS):
        raise APIError(400, f"This model's embeddings cannot be shortened ('dimensions'): it was not trained for it "
                            f"(Matryoshka); its embeddings have {width} dimensions.", param="dimensions",
                       code="invalid_value")
    cut = np.ascontiguousarray(vectors[:, :dimensions])
    if normalized:
        cut /= np.maximum(np.linalg.norm(cut, axis=1, keepdims=True), 1e-12)
    return cut


def encode(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.astype(np.float32).tolist()


def embedding_list(vectors: np.ndarray, model_id: str, encoding_format: str, tokens: int) -> dict[str, Any]:
    data = [s.Embedding(index=i, embedding=encode(v, encoding_format)) for i, v in enumerate(vectors)]
    return s.EmbeddingList(data=data, model=model_id,
                           usage=s.EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens)).model_dump()


def document_texts(documents: Sequence[Any]) -> list[str]:
    texts = []
    for i, doc in enumerate(documents):
        text = doc if isinstance(doc, str) else doc.get("text") if isinstance(doc, dict) else None
        if not isinstance(text, str) or not text:
            raise APIError(400, f"'documents.{i}' must be a non-empty text or an object with a \"text\".",
                           param=f"documents.{i}", code="invalid_value")
        texts.append(text)
    return texts


def rerank_response(scores: np.ndarray, texts: Sequence[str], req: s.RerankRequest, model_id: str,
                    tokens: int) -> dict[str, Any]:
    order = sorted(range(len(texts)), key=lambda i: -float(scores[i]))[:req.top_n or len(texts)]
    results = [s.RerankResult(index=i, relevance_score=float(scores[i]),
                              document=s.RerankDocument(text=texts[i]) if req.return_documents else None)
               for i in order]
    body = s.RerankResponse(model=model_id, results=results,
                            usage=s.EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens)).model_dump()
    if not req.return_documents:
        for result in body["results"]:
            del result["document"]
    return body
