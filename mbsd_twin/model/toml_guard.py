"""Limits checked before a mechanism file reaches :mod:`tomllib`, and the guarded parse itself.

``tomllib`` is recursive (a deeply nested inline table or array exhausts the interpreter's stack
with a bare ``RecursionError``) and slow on pathological dotted keys (about quadratic: a 50,000-part
key takes over 10 s). :func:`structure_problems` scans the text once, in linear time, skipping
strings and comments, and reports the first place where the nesting of arrays / inline tables or
the number of parts of one dotted key exceeds its limit, with line and column. :func:`parse` runs
that scan and the size limit, then ``tomllib``, and turns every failure (syntax, an integer too
long for Python's conversion limit, the stack) into a located :class:`MechanismError`.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from ..errors import MechanismError, Problem

MAX_BYTES = 2 * 1024 * 1024  # a mechanism file is a few kB; a long spline or terrain well under 1 MB
MAX_NESTING = 32  # arrays / inline tables inside each other (a curve's points need 2)
MAX_KEY_PARTS = 32  # parts of one dotted key or table header (a.b.c has 3)
MAX_ELEMENTS = 1000  # elements of one section ([[bodies]], [[joints]], ...)

_OPEN, _CLOSE = "[{", "]}"
# characters that end a (dotted) key: what can follow or precede one outside a string
_KEY_END = set("=,{}[]\n")


def size_problem(n_bytes: int, source: str) -> MechanismError | None:
    """The error for a file of ``n_bytes`` over :data:`MAX_BYTES`, or None."""
    if n_bytes <= MAX_BYTES:
        return None
    return MechanismError([Problem(source, f"file too large: {n_bytes} bytes (limit {MAX_BYTES} bytes); "
                                           "a mechanism file is normally a few kB")], source=source)


def _where(text: str, i: int, source: str) -> str:
    line = text.count("\n", 0, i) + 1
    return f"{source}: line {line}, column {i - (text.rfind(chr(10), 0, i) + 1) + 1}"


def _skip_string(text: str, i: int) -> int:
    """Index just past the string starting at ``text[i]`` (a quote); len(text) if unterminated
    (tomllib reports that one)."""
    q = text[i]
    if text.startswith(q * 3, i):
        end = text.find(q * 3, i + 3)
        if q == '"':
            while end != -1 and _escaped(text, end):
                end = text.find(q * 3, end + 1)
        if end == -1:
            return len(text)
        end += 3
        while end < len(text) and text[end] == q:  # up to two quotes may end the content
            end += 1
        return end
    j = i + 1
    while j < len(text) and text[j] != q and text[j] != "\n":
        j += 2 if q == '"' and text[j] == "\\" else 1
    return j + 1


def _escaped(text: str, i: int) -> bool:
    n = 0
    while i - n - 1 >= 0 and text[i - n - 1] == "\\":
        n += 1
    return n % 2 == 1


def structure_problems(text: str, source: str) -> list[Problem]:
    """The first excess of nesting or dotted-key length in ``text`` (TOML), located; [] if none."""
    depth = dots = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            i = _skip_string(text, i)
            continue
        if c == "#":
            j = text.find("\n", i)
            i = n if j == -1 else j
            continue
        if c in _OPEN:
            depth += 1
            if depth > MAX_NESTING:
                return [Problem(_where(text, i, source), f"arrays / inline tables nested more than "
                                                         f"{MAX_NESTING} deep")]
        elif c in _CLOSE:
            depth = max(0, depth - 1)
        if c in _KEY_END:
            dots = 0
        elif c == ".":
            dots += 1
            if dots >= MAX_KEY_PARTS:
                return [Problem(_where(text, i, source), f"a dotted key or table header with more than "
                                                         f"{MAX_KEY_PARTS} parts")]
        i += 1
    return []


def _syntax_error(exc: tomllib.TOMLDecodeError, source: str) -> MechanismError:
    text = str(exc)
    m = re.search(r"\s*\(at line (\d+), column (\d+)\)$", text)
    if m is None:
        m = re.search(r"\s*\(at end of document\)$", text)
        where = f"{source}: end of document" if m else source
    else:
        where = f"{source}: line {m.group(1)}, column {m.group(2)}"
    message = text[: m.start()] if m else text
    return MechanismError([Problem(where, f"TOML syntax error: {message}")], source=source)


def parse(text: str, source: str) -> dict[str, Any]:
    """``tomllib.loads(text)`` within the limits above; every failure a located MechanismError."""
    size = size_problem(len(text.encode("utf-8", "surrogatepass")), source)
    if size is not None:
        raise size
    problems = structure_problems(text, source)
    if problems:
        raise MechanismError(problems, source=source)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(exc, source) from exc
    except ValueError as exc:  # an integer literal longer than Python's conversion limit (4300 digits)
        m = re.search(r"[0-9_]{4300,}", text)
        where = _where(text, m.start(), source) if m else source
        raise MechanismError([Problem(where, f"TOML value not readable: {exc}")], source=source) from exc
    except RecursionError as exc:  # not reachable within MAX_NESTING; kept as a last resort
        raise MechanismError([Problem(source, "TOML structure nested too deeply")], source=source) from exc
