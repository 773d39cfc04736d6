"""`uniqueItems: true`, enforced while the text is generated.

llguidance has no uniqueness (a grammar cannot remember which items it produced), so the schema
handed to it leaves uniqueItems out (grammar.py) and this module keeps the items apart:

  * `JsonScanner` follows the generated JSON character by character (it is compact and valid:
    the grammar sees to that) with a stack of open containers. Each open array knows the
    schemas that may apply to it (resolved from the original schema through properties,
    patternProperties, additionalProperties, prefixItems / items, $ref, allOf, anyOf and oneOf)
    and so whether its items must be unique, and keeps the values of its finished items.
  * An item is finished at the "," or "]" after it. A token whose text would finish an item
    equal (by JSON Schema's equality: 1 == 1.0, true != 1, objects unordered) to an earlier one
    of the same array is refused, like a token the grammar refuses.
  * Refusing the closing token can leave no token at all (an enum item, `true`, a closed object):
    then the matcher backtracks (matcher.py): the last token is taken back, banned at its place,
    and the step before is drawn again, a depth-first search in the model's own order.

The scanner reads bytes (a token may hold part of a character), one character per byte:
JSON's structure is ASCII, and a finished item or key is whole UTF-8 when it is decoded.

Where several schemas may apply (anyOf, oneOf), an array is kept unique if any of them asks:
stricter than needed in rare cases, never looser, so the text always validates. Text cannot be
taken back once shown, so `commit_point` tells the loop how much of it is final: everything
before the outermost open unique array.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

Schema = Mapping[str, Any]


def _decoded(text: str) -> Any:
    """The JSON value of scanner text (bytes as latin-1 characters)."""
    return json.loads(text.encode("latin-1").decode("utf-8"))


class TokenTexts:
    """Every token's bytes as scanner text, and which tokens can end an array item (hold a "," or
    a "]"): only those need the guard's check. Built once per model (a fraction of a second on
    a 262k vocabulary)."""

    def __init__(self, tokenizer: Any):
        texts = []
        for i in range(tokenizer.vocab_size):
            try:
                texts.append(tokenizer.decode_bytes([i]).decode("latin-1"))
            except Exception:  # noqa: BLE001 - ids past the vocabulary (padding of the logits)
                texts.append("")
        self._texts = texts
        self.ends_item = np.fromiter(("," in t or "]" in t for t in texts), bool, len(texts))
        # Inside a string only a token that closes it can go on to end an item.
        self.ends_item_in_string = self.ends_item & np.fromiter(('"' in t for t in texts), bool, len(texts))

    def text(self, token: int) -> str:
        return self._texts[token]


class _Resolver:
    """Which subschemas apply at a key or an index, following local $refs."""

    def __init__(self, root: Schema):
        self.root = root

    def _ref(self, ref: str) -> Any:
        if not ref.startswith("#"):
            raise ValueError(f"uniqueItems: only local $refs can be followed, not {ref!r}")
        node: Any = self.root
        for part in ref[1:].split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            node = node[int(part)] if isinstance(node, list) else node.get(part) if isinstance(node, dict) else None
            if node is None:
                raise ValueError(f"uniqueItems: the $ref {ref!r} points at nothing")
        return node

    def expand(self, schemas: list[Any]) -> list[Schema]:
        """The schemas themselves and every schema they combine or refer to (dicts only)."""
        out: list[Schema] = []
        seen: set[int] = set()
        todo = list(schemas)
        while todo:
            s = todo.pop()
            if not isinstance(s, dict) or id(s) in seen:
                continue
            seen.add(id(s))
            out.append(s)
            if isinstance(s.get("$ref"), str):
                todo.append(self._ref(s["$ref"]))
            for key in ("allOf", "anyOf", "oneOf"):
                if isinstance(s.get(key), list):
                    todo.extend(s[key])
        return out

    def at_key(self, schemas: list[Schema], key: str) -> list[Schema]:
        children: list[Any] = []
        for s in schemas:
            props = s.get("properties") if isinstance(s.get("properties"), dict) else {}
            matched = [v for p, v in (s.get("patternProperties") or {}).items() if re.search(p, key)]
            if key in props:
                children.append(props[key])
            children.extend(matched)
            if key not in props and not matched and isinstance(s.get("additionalProperties"), dict):
                children.append(s["additionalProperties"])
        return self.expand(children)

    def at_index(self, schemas: list[Schema], index: int) -> list[Schema]:
        children: list[Any] = []
        for s in schemas:
            prefix = s.get("prefixItems")
            items = s.get("items")
            if isinstance(prefix, list) and index < len(prefix):
                children.append(prefix[index])
            elif isinstance(items, list):   # draft 4-2019 tuple form
                children.append(items[index] if index < len(items) else s.get("additionalItems"))
            else:
                children.append(items)
        return self.expand(children)


def _canonical(value: Any) -> Any:
    """A hashable form under which two JSON values are equal exactly when JSON Schema says so."""
    if isinstance(value, bool) or value is None:
        return ("const", value)
    if isinstance(value, (int, float)):
        return ("number", value)   # 1 == 1.0 in Python as in JSON Schema
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("array", tuple(_canonical(v) for v in value))
    return ("object", frozenset((k, _canonical(v)) for k, v in value.items()))


@dataclass
class _Frame:
    """An open container: what applies to it, where its current child starts, what it holds."""
    is_array: bool
    schemas: list[Schema]
    unique: bool = False
    opened_at: int = 0            # offset of its "[" / "{" in the text
    key: str | None = None        # objects: the key whose value comes next
    index: int = 0                # arrays: the index of the current item
    item_start: int | None = None  # arrays: offset where the current item began
    seen: set = field(default_factory=set)   # unique arrays: canonical values of finished items

    def copy(self) -> "_Frame":
        return _Frame(self.is_array, self.schemas, self.unique, self.opened_at, self.key, self.index,
                      self.item_start, set(self.seen))


class DuplicateItem(Exception):
    """The text would finish an array item equal to an earlier one of a uniqueItems array.
    `redo_from`: the offset where a different item should begin (a string's first character
    after its quote, else the item's first character)."""

    def __init__(self, item: str, redo_from: int):
        super().__init__(item)
        self.redo_from = redo_from


class JsonScanner:
    """Follows compact JSON text as it grows (see the module doc). Offsets are absolute; only
    the text of open unique arrays is kept (`_buf` holds the text from offset `_buf_at` on)."""

    def __init__(self, schema: Schema, resolver: _Resolver | None = None):
        self._resolver = resolver or _Resolver(schema)
        self._root = self._resolver.expand([schema])
        self.end = 0                 # offset after the last character seen
        self._buf = ""
        self._buf_at = 0
        self.stack: list[_Frame] = []
        self._in_string = False
        self._escape = False
        self._string_start = 0

    def copy(self) -> "JsonScanner":
        other = JsonScanner.__new__(JsonScanner)
        other.__dict__.update(self.__dict__)
        other.stack = [f.copy() for f in self.stack]
        return other

    @property
    def in_string(self) -> bool:
        return self._in_string

    @property
    def commit_point(self) -> int:
        """Offset before which nothing can be taken back: the outermost open unique array's "["."""
        return next((f.opened_at for f in self.stack if f.unique), self.end)

    def _text(self, start: int, end: int) -> str:
        return self._buf[start - self._buf_at:end - self._buf_at]

    def feed(self, text: str) -> None:
        """Advances over `text`; DuplicateItem if it finishes a duplicate (the state is then spoilt:
        feed a copy when testing a candidate)."""
        self._buf += text
        for i, ch in enumerate(text):
            self._char(ch, self.end + i)
        self.end += len(text)
        if not self._in_string and not any(f.unique for f in self.stack):
            self._buf, self._buf_at = "", self.end   # nothing kept is needed any more

    def _schemas_of_next_value(self) -> list[Schema]:
        if not self.stack:
            return self._root
        top = self.stack[-1]
        if top.is_array:
            return self._resolver.at_index(top.schemas, top.index)
        return self._resolver.at_key(top.schemas, top.key or "")

    def _value_starts(self, pos: int) -> None:
        if self.stack and self.stack[-1].is_array and self.stack[-1].item_start is None:
            self.stack[-1].item_start = pos

    def _item_ends(self, frame: _Frame, pos: int) -> None:
        if frame.item_start is None:   # "[]"
            return
        if frame.unique:
            item = self._text(frame.item_start, pos)
            try:
                value = _canonical(_decoded(item))
            except ValueError:   # a candidate the grammar refuses anyway (the guard may be asked first)
                return
            if value in frame.seen:
                raise DuplicateItem(item, frame.item_start + (1 if item.startswith('"') else 0))
            frame.seen.add(value)
        frame.index += 1
        frame.item_start = None

    def _char(self, ch: str, pos: int) -> None:
        if self._in_string:
            if self._escape:
                self._escape = False
            elif ch == "\\":
                self._escape = True
            elif ch == '"':
                self._in_string = False
                top = self.stack[-1] if self.stack else None
                if top is not None and not top.is_array and top.key is None:
                    top.key = _decoded(self._text(self._string_start, pos + 1))
            return
        top = self.stack[-1] if self.stack else None
        if ch == '"':
            if not (top is not None and not top.is_array and top.key is None):
                self._value_starts(pos)
            self._in_string = True
            self._string_start = pos
        elif ch in "[{":
            self._value_starts(pos)
            schemas = self._schemas_of_next_value()
            unique = ch == "[" and any(s.get("uniqueItems") is True for s in schemas)
            self.stack.append(_Frame(ch == "[", schemas, unique, opened_at=pos))
        elif ch in "]}":
            frame = self.stack.pop()
            if frame.is_array:
                self._item_ends(frame, pos)
        elif ch == ",":
            if top is not None and top.is_array:
                self._item_ends(top, pos)
            elif top is not None:
                top.key = None
        elif ch == ":" or ch.isspace():
            pass
        else:   # a number, true, false or null going on
            self._value_starts(pos)


class UniqueItemsGuard:
    """The scanner's state after each generated token that may still be taken back."""

    def __init__(self, schema: Schema):
        self._states = [JsonScanner(schema)]   # after tokens _base, _base + 1, ..., n_tokens
        self._base = 0

    @property
    def scanner(self) -> JsonScanner:
        return self._states[-1]

    @property
    def n_tokens(self) -> int:
        return self._base + len(self._states) - 1

    def duplicate_from(self, text: str) -> int | None:
        """None if appending `text` keeps every unique array's items apart; else the offset
        where the duplicate item should have been different (DuplicateItem.redo_from)."""
        if "," not in text and "]" not in text:
            return None   # no item can end inside it
        trial = self.scanner.copy()
        try:
            trial.feed(text)
        except DuplicateItem as dup:
            return dup.redo_from
        return None

    def candidates(self, texts: TokenTexts) -> np.ndarray:
        """[n_vocab] bool: the tokens whose text may finish an item from the current state."""
        return texts.ends_item_in_string if self.scanner.in_string else texts.ends_item

    def tokens_from(self, offset: int) -> int:
        """How many of the last tokens to take back so that the one holding `offset` is drawn
        again (at least 1, and never a final token)."""
        k = len(self._states) - 1
        while k > 1 and self._states[k - 1].end > offset:
            k -= 1
        return len(self._states) - k

    def push(self, text: str) -> None:
        """Appends a token's text (one it allowed)."""
        state = self.scanner.copy()
        state.feed(text)
        self._states.append(state)
        final = self.committed_tokens()
        if final > self._base:   # states no backtrack can return to
            del self._states[:final - self._base]
            self._base = final

    def pop(self) -> None:
        """Takes back the last token's text; ValueError past what is final."""
        if len(self._states) == 1:
            raise ValueError("no token left that may be taken back")
        self._states.pop()

    def committed_tokens(self) -> int:
        """How many leading tokens are final: those that end before the outermost open unique
        array's "[" (the token holding it may still be drawn again)."""
        point = self.scanner.commit_point
        k = len(self._states) - 1
        while k > 0 and self._states[k].end > point:
            k -= 1
        return self._base + k
