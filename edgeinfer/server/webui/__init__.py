"""The chat page at / : static files in this folder (no build step, nothing from a CDN), served by
the server itself; the page talks to the same server's /v1 API."""
from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

FOLDER = Path(__file__).parent / "static"


def mount_chat_page(app: FastAPI) -> None:
    # HEAD too: Ollama's CLI and uptime monitors check the server is up with HEAD /.
    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def chat_page() -> FileResponse:
        return FileResponse(FOLDER / "index.html", headers={"Cache-Control": "no-cache"})

    app.mount("/ui", StaticFiles(directory=FOLDER), name="ui")
