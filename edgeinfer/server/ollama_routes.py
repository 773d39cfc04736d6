"""The /api routes of Ollama's API, so apps that speak only Ollama's work unchanged: /api/chat,
/api/generate, /api/embed, /api/embeddings, /api/tags, /api/show, /api/ps, /api/version. Errors are
Ollama's {"error": "..."} (errors.py shapes every /api answer so)."""
from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

import gguf
from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from edgeinfer import _core
from edgeinfer.errors import ModelFormatError
from edgeinfer.server import embeddings, prompts, schemas as s
from edgeinfer.server.config import ServerConfig, parse_keep_alive
from edgeinfer.server.errors import APIError
from edgeinfer.server.model_pool import SERVER_KEEP_ALIVE, ModelPool, Resident
from edgeinfer.server.ollama import (NDJSON, OLLAMA_API_VERSION, OllamaAnswer, chat_request, check_think, digest,
                                     field_sources, generate_request, ndjson_lines, now_iso, ollama_name, renamed,
                                     whole_answer)
from edgeinfer.server.ollama_schemas import (OllamaChatRequest, OllamaEmbedRequest, OllamaGenerateRequest,
                                             OllamaLegacyEmbedRequest, OllamaModelRequest)
from edgeinfer.server.served_models import ServedModel
from edgeinfer.server.worker import EngineState


def details(served: ServedModel) -> dict[str, Any]:
    """Ollama's `details` of a model file, from its metadata and tensor table (no loading)."""
    try:
        f = _core.GgufFile(str(served.path))
    except Exception:  # noqa: BLE001 - unreadable or not pulled yet: the listing still names it
        return {"format": "gguf", "family": "", "families": None, "parameter_size": "", "quantization_level": "",
                "parent_model": ""}
    arch = f.get("general.architecture") or ""
    n = sum(_count(t["shape"]) for t in f.tensors())
    size = f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"
    try:
        level = gguf.LlamaFileType(int(f.get("general.file_type"))).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except (TypeError, ValueError):
        level = ""
    return {"parent_model": "", "format": "gguf", "family": arch, "families": [arch] if arch else None,
            "parameter_size": size, "quantization_level": level}


def _count(shape: list[int]) -> int:
    n = 1
    for dim in shape:
        n *= int(dim)
    return n


def _modified_at(served: ServedModel) -> str:
    try:
        return now_iso(served.path.stat().st_mtime)
    except OSError:
        return now_iso(0)


def _keep_alive(value: Any) -> Any:
    if value is None:
        return SERVER_KEEP_ALIVE
    try:
        return parse_keep_alive(value)
    except ValueError as exc:
        raise APIError(400, str(exc), param="keep_alive", code="invalid_value") from None


def make_ollama_router(config: ServerConfig, pool: ModelPool) -> APIRouter:
    router = APIRouter(prefix="/api", tags=["Ollama"])

    async def acquire(model: str, keep_alive: Any) -> tuple[Resident, float]:
        started = time.perf_counter()
        resident = await pool.acquire(model, keep_alive=_keep_alive(keep_alive))
        return resident, time.perf_counter() - started

    async def preload(body: Any) -> tuple[Resident, float]:
        """Loads the model a request names without using it (Ollama's empty prompt or input)."""
        resident, load_s = await acquire(body.model, body.keep_alive)
        pool.release(resident)
        return resident, load_s

    async def load_only(body: Any, kind: str) -> dict[str, Any]:
        """An empty prompt loads the model, or with keep_alive 0 unloads it (once its requests are
        done; loading nothing), as Ollama's does."""
        keep_alive = _keep_alive(body.keep_alive)
        served = pool.lookup(body.model)
        if keep_alive == 0 and await pool.unload(served.model_id):
            reason = "unload"
        else:
            await preload(body)
            reason = "load"
        answer = {"model": ollama_name(served), "created_at": now_iso(), "done": True, "done_reason": reason}
        return answer | ({"message": {"role": "assistant", "content": ""}} if kind == "chat" else {"response": ""})

    async def run(kind: str, body: Any, arrived: float) -> Any:
        try:
            return await run_as_openai(kind, body, arrived)
        except APIError as exc:   # about a field of the OpenAI request: name the client's
            raise renamed(exc, field_sources(body)) from None

    async def run_as_openai(kind: str, body: Any, arrived: float) -> Any:
        request = chat_request(body) if kind == "chat" else generate_request(body)
        resident, load_s = await acquire(body.model, body.keep_alive)
        try:
            model = resident.engine.model
            if isinstance(request, s.ChatCompletionRequest):
                prompts.check_supported_chat(request)
                job = await run_in_threadpool(prompts.chat_job, request, model, config)
            else:
                prompts.check_supported_completion(request)
                job = await run_in_threadpool(prompts.completion_job, request, model, config)
            check_think(body.think, job.reasoning, ollama_name(resident.served))
            answer = OllamaAnswer(kind, ollama_name(resident.served), job.tool_format, arrived, load_s,
                                  job.reasoning, body.think)
            resident.engine.submit(job)
        finally:
            pool.release(resident)
        if body.stream:
            return StreamingResponse(ndjson_lines(job, answer), media_type=NDJSON)
        return JSONResponse(await whole_answer(job, answer))

    @router.post("/chat", summary="Chat (Ollama's API)")
    async def chat(body: OllamaChatRequest) -> Any:
        arrived = time.perf_counter()
        if not body.messages:
            return JSONResponse(await load_only(body, "chat"))
        return await run("chat", body, arrived)

    @router.post("/generate", summary="Generate from a prompt (Ollama's API)")
    async def generate(body: OllamaGenerateRequest) -> Any:
        arrived = time.perf_counter()
        if not body.prompt and not body.suffix:
            return JSONResponse(await load_only(body, "generate"))
        return await run("generate", body, arrived)

    async def embed_with(body: Any, inputs: list[str], field: str, truncate: bool,
                         normalize: bool) -> tuple[Any, Any, str, int, float]:
        resident, load_s = await acquire(body.model, body.keep_alive)
        try:
            model = resident.engine.model
            embeddings.check_can_embed(model, resident.served.model_id)
            ids = await run_in_threadpool(embeddings.input_ids, inputs, model, field)
            tokens = embeddings.check_lengths(ids, model.n_ctx, truncate, field)
            vectors = await run_in_threadpool(resident.engine.call_model, model.embed, ids, normalize=normalize,
                                              truncate=truncate)
        finally:
            pool.release(resident)
        return vectors, model, ollama_name(resident.served), tokens, load_s

    @router.post("/embed", summary="Embeddings (Ollama's API)")
    async def embed(body: OllamaEmbedRequest) -> dict[str, Any]:
        arrived = time.perf_counter()
        if not body.input:   # "" or []: load the model only
            resident, load_s = await preload(body)
            return {"model": ollama_name(resident.served), "embeddings": [],
                    "total_duration": int((time.perf_counter() - arrived) * 1e9), "load_duration": int(load_s * 1e9),
                    "prompt_eval_count": 0}
        inputs = [body.input] if isinstance(body.input, str) else body.input
        vectors, model, name, tokens, load_s = await embed_with(body, inputs, "input", body.truncate, normalize=True)
        vectors = embeddings.fewer_dimensions(vectors, body.dimensions, model, normalized=True)
        return {"model": name, "embeddings": vectors.tolist(),
                "total_duration": int((time.perf_counter() - arrived) * 1e9), "load_duration": int(load_s * 1e9),
                "prompt_eval_count": tokens}

    @router.post("/embeddings", summary="One embedding, not normalized (Ollama's older API)")
    async def legacy_embeddings(body: OllamaLegacyEmbedRequest) -> dict[str, Any]:
        if not body.prompt:   # load the model only
            await preload(body)
            return {"embedding": []}
        vectors, *_ = await embed_with(body, [body.prompt], "prompt", truncate=True, normalize=False)
        return {"embedding": vectors[0].tolist()}

    def listed(served: ServedModel) -> dict[str, Any]:
        name = ollama_name(served)
        return {"name": name, "model": name, "modified_at": _modified_at(served), "size": served.file_size,
                "digest": digest(served), "details": details(served)}

    @router.api_route("/tags", methods=["GET", "HEAD"], summary="The models on this machine (Ollama's API)")
    async def tags() -> dict[str, Any]:
        present = [m for m in pool.available() if m.present]
        return {"models": await run_in_threadpool(lambda: [listed(m) for m in present])}

    @router.get("/ps", summary="The loaded models (Ollama's API)")
    async def ps() -> dict[str, Any]:
        out = []
        for r in pool.residents():
            if r.engine.state is not EngineState.READY:
                continue
            expires = (datetime(9999, 1, 1, tzinfo=timezone.utc).isoformat().replace("+00:00", "Z")
                       if r.keep_alive is None else now_iso(time.time() + max(0.0, r.expires_in())))
            out.append(listed(r.served) | {"expires_at": expires, "size_vram": 0,
                                           "context_length": r.engine.model.n_ctx})
        return {"models": out}

    @router.post("/show", summary="A model's details, template and metadata (Ollama's API)")
    async def show(body: OllamaModelRequest) -> dict[str, Any]:
        if not body.requested:
            raise APIError(400, "Missing required parameter: 'model'.", param="model", code="missing_field")
        served = pool.lookup(body.requested)
        if not served.present:
            raise APIError(404, f"The model {body.requested!r} is not pulled yet (it is, on its first use).",
                           param="model", code="model_not_found")
        try:
            return await run_in_threadpool(_show, served)
        except ModelFormatError as exc:   # a broken file in the models folder: the server's, as loading it is
            raise APIError(503, f"The model file of {body.requested!r} cannot be read: {exc}", type="server_error",
                           code="model_failed") from None

    # HEAD too, as Ollama's: its CLI checks the server is up with HEAD /.
    @router.api_route("/version", methods=["GET", "HEAD"],
                      summary="The Ollama API version this follows (Ollama's API)")
    async def version() -> dict[str, str]:
        from edgeinfer import __version__

        return {"version": OLLAMA_API_VERSION, "edgeinfer": __version__}

    return router


def _show(served: ServedModel) -> dict[str, Any]:
    f = _core.GgufFile(str(served.path))
    info: dict[str, Any] = {}
    for key in f.keys():
        value = f.get(key)
        # Ollama leaves the tokenizer's big arrays out (null) unless asked for verbose output.
        info[key] = None if isinstance(value, list) and len(value) > 64 else value
    template = f.get("tokenizer.chat_template") or ""
    capabilities = ["completion"] + (["tools"] if "tools" in template else [])
    return {"modelfile": "", "parameters": "", "template": template, "details": details(served),
            "model_info": info, "capabilities": capabilities, "modified_at": _modified_at(served)}
