"""Passwords never leave the process that needs them: :func:`url_password_problem` refuses a
password written into a URL or connection string of the configuration (``[broker] url``, ``[history]
dsn``, ``[fleet] store``, ``[fleet] broker``), naming the key but never the password, and
:func:`redact` masks any that got into a text all the same — in a URL's user-info
(``scheme://user:***@host``) or a ``password=`` parameter (a URL's query or a libpq keyword) — before
it is logged, published (births, the fleet status, health) or written to a history row.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit

_USERINFO = re.compile(r"(://[^:/@\s]*):[^\s/]*@")  # scheme://user:PASSWORD@host (up to the last @)
_WORD = re.compile(r"(?i)\b(\w*password|passwd|pwd)\b")  # also without "=" (a mistyped keyword)
_PARAM = re.compile(r"(?i)\b(\w*pass(?:word|wd)?|pwd)(\s*=\s*)('(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^\s&;,)'\"]+)")


def _is_password_name(name: str) -> bool:
    n = name.strip().lower()
    return n in ("pwd", "pass") or "password" in n or n.endswith("passwd")


def url_password_problem(key: str, url: str, instead: str) -> str | None:
    """A configuration problem naming ``key`` when ``url`` (a URL or a libpq ``key=value`` string)
    carries a password; None otherwise. ``instead`` says where the password goes. Never shows it."""
    if not isinstance(url, str) or not url:
        return None
    found = False
    if "://" in url:
        try:
            u = urlsplit(url)
            found = u.password is not None or any(_is_password_name(k) for k, _ in parse_qsl(u.query))
        except ValueError:  # an unparsable URL: judged by its text below
            found = True
    found = found or bool(_PARAM.search(url) or _USERINFO.search(url) or _WORD.search(url))
    return f"{key} must not carry a password (not shown); {instead}" if found else None


def secrets_of(url: str) -> list[str]:
    """The passwords written into ``url`` (to mask wherever else they might be echoed)."""
    out: list[str] = []
    try:
        u = urlsplit(url)
        if u.password:
            out += [u.password, unquote(u.password)]
        out += [v for k, v in parse_qsl(u.query) if _is_password_name(k) and v]
    except ValueError:
        pass
    out += [m.group(3).strip("'\"") for m in _PARAM.finditer(url)]
    return [s for s in out if len(s) >= 3]


def redact(text: str, *sources: str) -> str:
    """``text`` with every password masked: a URL's user-info password, ``password=`` parameters,
    and the passwords written into each of ``sources`` (URLs or connection strings the text may
    echo in another form, e.g. percent-decoded in an error message) wherever they occur."""
    if not isinstance(text, str):
        text = str(text)
    for w in sorted({w for s in sources if s for w in secrets_of(s)}, key=len, reverse=True):
        text = text.replace(w, "***")
    text = _USERINFO.sub(r"\1:***@", text)
    return _PARAM.sub(lambda m: f"{m.group(1)}{m.group(2)}***", text)
