"""Saving and resuming a conversation: a JSON transcript plus the KV state beside it.

``/save chat.json`` writes ``chat.json`` (system prompt, messages, settings, which model) and
``chat.json.kvstate`` (the prompt cache's tokens and KV rows, `Model.save_state`'s versioned,
checksummed format with the model's fingerprint). ``/load chat.json`` restores the conversation
and then the state, so the next message is answered without prefilling the conversation again.
A state that does not fit (another model, other KV types, a damaged file) is refused by the core
with StateFileError; the conversation is then decoded again from the transcript instead.

Both files are written to a temporary name and renamed into place, so an interrupted save never
leaves half a file under the final name.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeinfer.errors import StateFileError
from edgeinfer.repl.session import ChatSession, Settings

FORMAT = "edgeinfer-chat"
VERSION = 1
STATE_SUFFIX = ".kvstate"


def state_path(path: Path) -> Path:
    """Where the KV state of the transcript at `path` lives."""
    return path.with_name(path.name + STATE_SUFFIX)


@dataclass
class Saved:
    state_path: Path
    state_tokens: int


@dataclass
class Loaded:
    state_tokens: int | None     # tokens restored from the state file, None if it was not used
    state_error: str = ""        # why the state was not used
    prefilled: int = 0           # tokens decoded from the transcript instead


def to_json(session: ChatSession, model_name: str) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": {"name": model_name, "file": Path(session.model.path).name},
        "system": session.system,
        "settings": session.settings.to_dict(),
        "messages": [dict(m) for m in session.messages],
    }


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def save(session: ChatSession, path: Path, model_name: str) -> Saved:
    """Writes the transcript to `path` and the KV state next to it."""
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder")
    state = state_path(path)
    n = session.model.save_state(state)
    _write_atomically(path, json.dumps(to_json(session, model_name), ensure_ascii=False, indent=2) + "\n")
    return Saved(state, n)


def parse(data: Any, source: Path) -> tuple[str | None, Settings, list[dict[str, str]]]:
    """(system, settings, messages) of a transcript; ValueError saying what is wrong."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{source} is not an edgeinfer chat transcript")
    if data.get("version") != VERSION:
        raise ValueError(f"{source} has transcript version {data.get('version')!r}; "
                         f"this edgeinfer reads version {VERSION}")
    system = data.get("system")
    if system is not None and not isinstance(system, str):
        raise ValueError(f"{source}: 'system' must be a string")
    messages = data.get("messages")
    if not isinstance(messages, list) or not all(
            isinstance(m, dict) and m.get("role") in ("user", "assistant")
            and isinstance(m.get("content"), str) for m in messages):
        raise ValueError(f"{source}: 'messages' must be a list of user/assistant messages with text")
    settings = data.get("settings") or {}
    if not isinstance(settings, dict):
        raise ValueError(f"{source}: 'settings' must be an object")
    try:
        restored = Settings.from_dict(settings)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{source}: bad settings ({exc})") from None
    return system, restored, [{"role": m["role"], "content": m["content"]} for m in messages]


def load(session: ChatSession, path: Path) -> Loaded:
    """Replaces the session's conversation with the transcript at `path` and makes the KV cache
    hold it: from the saved state if the model accepts it, else by decoding it again."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc})") from None
    system, settings, messages = parse(data, path)
    session.system = system
    session.settings = settings
    session.messages = messages
    session.last_stats = None
    state = state_path(path)
    if not state.exists():
        return Loaded(None, f"{state.name} not found", session.prefill())
    try:
        n = session.model.load_state(state)
    except StateFileError as exc:
        return Loaded(None, f"refused: {exc}", session.prefill())
    return Loaded(n)
