"""Atomic file writes: a temporary file beside the target, renamed over it, so a reader sees the old
file or the new one and never half of one.

The file gets the permissions a plain ``open(path, "w")`` gives: the temporary file is created with
``os.open(..., 0o666)``, so the kernel applies the process's umask (0644 with the usual 022) and
the folder's default ACL. ``tempfile.mkstemp`` creates its file 0600 whatever the umask, and the
rename keeps that mode, which left result files unreadable to the group and to other users.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def _create_beside(path: Path) -> tuple[int, Path]:
    """A new, empty, open file in ``path``'s folder (mode 0o666 less the umask) and its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, _FLAGS, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{path.parent}: no free temporary file name for {path.name} in 100 tries")


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8, ``\\n`` line ends) to ``path`` atomically; the folder is created if
    needed."""
    target = Path(path)
    fd, tmp = _create_beside(target)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """For a writer that takes a file name (a CSV writer, ``pyarrow.parquet.write_table``): a
    temporary path beside ``path``, already created with the umask's permissions, renamed over
    ``path`` when the block ends, removed if it raises."""
    target = Path(path)
    fd, tmp = _create_beside(target)
    os.close(fd)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
