"""The server's error answers as a client sees them: an OpenAI-style body
({"error": {"message", "type", "param", "code"}}) that shows nothing of the server's insides."""
from __future__ import annotations

import re

# What an error answer must never show: a Python repr, a traceback, an exception class name.
LEAK = re.compile(r"object at 0x|Traceback|File \"|<edgeinfer|TypeError|KeyError|AttributeError|ValueError|"
                  r"pybind|pydantic")


def api_error(response, status: int = 400, **expected) -> dict:
    """The error object of `response` (an httpx or TestClient response), after checking its status,
    that every field in `expected` (param=, code=, type=) has that value, and that its message is
    there and shows no internals."""
    assert response.status_code == status, (status, response.text)
    error = response.json()["error"]
    for field, value in expected.items():
        assert error[field] == value, (field, response.text)
    assert error["message"] and not LEAK.search(error["message"]), response.text
    return error
