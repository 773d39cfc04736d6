"""`edgeinfer serve`: a local OpenAI-compatible HTTP server.

Each loaded model has an engine: its slots' threads serve a FIFO queue (worker.py); the pool
(model_pool.py) holds one model, or loads the models of the folder (served_models.py) by name on
demand and unloads them as Ollama does; the HTTP side (app.py,
FastAPI + uvicorn) validates requests (schemas.py), turns them into token prompts (prompts.py),
and shapes the worker's events into OpenAI responses (responses.py) or SSE streams (sse.py).
"""
from edgeinfer.server.config import ServerConfig

__all__ = ["ServerConfig"]
