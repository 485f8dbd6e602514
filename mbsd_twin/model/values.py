"""Checking and quoting single values for problem messages: numbers (finite, in range), 2-vectors,
close-match suggestions for misspelt names and a compact formatting of any value. Shared by the
validation of mechanisms, the TOML reader and the curve tables (:mod:`.surface_io`)."""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from numbers import Real

FMT_ITEMS, FMT_CHARS = 8, 80  # longest array and text shown whole in a message


def suggest(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest choice, or ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def is_number(x: object) -> bool:
    """A real number that is not a bool (numpy scalars included)."""
    return type(x) is float or type(x) is int or (isinstance(x, Real) and not isinstance(x, bool))


def to_float(x: object) -> float:
    """``float(x)`` of a number, ±inf for an integer too large for a float (TOML allows 4300 digits)."""
    try:
        return float(x)  # type: ignore[arg-type]
    except OverflowError:
        return -math.inf if x < 0 else math.inf  # type: ignore[operator]


def fmt(x: object) -> str:
    """Render a value for a message: numbers as floats, vectors as ``[x, y]``."""
    if is_number(x):
        return repr(to_float(x))
    if isinstance(x, tuple | list):
        if len(x) > FMT_ITEMS:  # a long array is shown by its first items and its length
            return "[" + ", ".join(fmt(v) for v in x[:FMT_ITEMS]) + f", ... ({len(x)} items)]"
        return "[" + ", ".join(fmt(v) for v in x) + "]"
    text = repr(x)
    return text if len(text) <= FMT_CHARS else f"{text[:FMT_CHARS]}... ({len(text)} characters)"


def number_problem(x: object, *, minimum: float | None = None, strict: bool = False,
                   nonzero: bool = False) -> str | None:
    """Why ``x`` is not a finite number in range, or ``None`` if it is fine."""
    number = is_number(x)
    v = to_float(x) if number else math.nan
    bad = (not math.isfinite(v) or (nonzero and v == 0.0)
           or (minimum is not None and (v <= minimum if strict else v < minimum)))
    if not bad:
        return None
    want = "a finite number"
    if minimum is not None:
        want += f" {'>' if strict else '>='} {minimum:g}"
    if nonzero:
        want = "a finite, non-zero number"
    return f"must be {want}, got {fmt(v) if number else repr(x)}"


def vector_problem(v: object, *, nonzero: bool = False) -> str | None:
    """Why ``v`` is not a finite 2-vector (non-zero if asked), or ``None`` if it is fine."""
    if not isinstance(v, tuple | list) or len(v) != 2 or not (is_number(v[0]) and is_number(v[1])):
        return f"must be a 2-vector [x, y] of numbers, got {fmt(v)}"
    x, y = to_float(v[0]), to_float(v[1])
    if not (math.isfinite(x) and math.isfinite(y)):
        return f"must be a finite vector, got {fmt(v)}"
    if nonzero and x == 0.0 and y == 0.0:
        return f"must be a non-zero vector, got {fmt(v)}"
    if nonzero and not 0.0 < x * x + y * y < math.inf:  # normalised as v/sqrt(x² + y²)
        return f"must be a direction of length between 1e-150 and 1e150, got {fmt(v)}"
    return None
