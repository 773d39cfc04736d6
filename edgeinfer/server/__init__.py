"""`edgeinfer serve`: a local OpenAI-compatible HTTP server.

One worker thread owns the model and serves a FIFO queue (worker.py); the HTTP side (app.py,
FastAPI + uvicorn) validates requests (schemas.py), turns them into token prompts (prompts.py),
and shapes the worker's events into OpenAI responses (responses.py) or SSE streams (sse.py).
"""
from edgeinfer.server.config import ServerConfig

__all__ = ["ServerConfig"]
