"""One rule for relative paths in the project's configuration files (docs/service-config.md,
"Relative paths"): a relative path written in a file — a twin configuration, a rig file, a fleet
file, a campaign file — is relative to the folder of that file; a path given on the command line
or in an environment variable stays relative to the working directory. Every loader resolves its
paths with :func:`resolve_path` (one rule, one place).

Twin configuration files resolved their paths against the working directory before (CHANGELOG,
"Unreleased"). So that no deployment silently reads another file or writes to another place after the
change, a path of such a file is checked against the old rule (``moved=True``): an *input* (a file
that must exist: a mechanism, a TLS file) that is missing beside the file but exists relative to
the working directory is a configuration problem naming the key and both paths; an *output* (a
recording, a history database, a spool folder, a checkpoint store) is written beside the file, with
one WARNING when the place the old rule named already exists.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger("mbsd_twin.config")

Kind = Literal["input", "output"]

# The path-valued keys of a twin configuration file: (section, key) → what the twin does with it.
TWIN_PATH_KEYS: dict[tuple[str, str], Kind] = {
    ("broker", "tls_ca"): "input",
    ("broker", "tls_cert"): "input",
    ("broker", "tls_key"): "input",
    ("service", "mechanism"): "input",
    ("record", "path"): "output",
    ("history", "path"): "output",
    ("history", "spool_dir"): "output",
}

RULE = 'docs/service-config.md, "Relative paths"'
_warned: set[tuple[str, str]] = set()


def folder_of(file: str | Path) -> str:
    """The absolute folder of a configuration file: the base of its relative paths."""
    return os.path.dirname(os.path.abspath(file))


def resolve_path(value: str, file: str | Path, key: str, kind: Kind = "input", problems: list[str] | None = None,
                 moved: bool = False) -> str:
    """``value`` as written at ``key`` of the configuration file ``file``: "" (unset), an absolute
    path and a URL (``scheme://…``) unchanged, a relative path joined to the file's folder.

    ``moved``: the file's relative paths were relative to the working directory before (twin
    configuration files); then an input missing beside the file but present relative to the working
    directory appends a problem to ``problems`` naming ``key`` and both paths, and an output whose
    old place exists is logged once at WARNING."""
    if not value or os.path.isabs(value) or "://" in value:
        return value
    path = os.path.normpath(os.path.join(folder_of(file), value))
    old = os.path.abspath(value)
    if moved and old != path and os.path.exists(old):
        if kind == "input" and not os.path.exists(path) and problems is not None:
            problems.append(f"{key} = {value!r}: the rule changed, a relative path in a configuration file is "
                            f"relative to the file's folder: {path} does not exist, while {old} (relative to the "
                            f"working directory, the rule before) does; write the path relative to "
                            f"{folder_of(file)} or absolute ({RULE})")
        elif kind == "output" and (key, old) not in _warned:
            _warned.add((key, old))
            log.warning("%s: %s = %r is written to %s (the rule changed: relative to the file's folder), not to "
                        "%s (relative to the working directory, the rule before), which exists; move it there or "
                        "write the path absolute (%s)", file, key, value, path, old, RULE)
    return path


def resolve_twin_paths(tables: dict[str, Any], file: str | Path, problems: list[str], where: str = "",
                       moved: bool = True) -> dict[str, Any]:
    """The twin configuration ``tables`` (section → key → value, as read from ``file``) with every
    path-valued key of :data:`TWIN_PATH_KEYS` resolved by :func:`resolve_path`; ``where`` prefixes
    the key in messages (a fleet file's ``[[asset]] 'a1' overrides``). Values that are not strings
    are left for the type checks."""
    out = {sec: dict(kv) if isinstance(kv, dict) else kv for sec, kv in tables.items()}
    for (sec, key), kind in TWIN_PATH_KEYS.items():
        table = out.get(sec)
        if isinstance(table, dict) and isinstance(table.get(key), str):
            label = f"{where} {sec}.{key}" if where else f"[{sec}] {key}"
            table[key] = resolve_path(table[key], file, label, kind, problems, moved)
    return out
