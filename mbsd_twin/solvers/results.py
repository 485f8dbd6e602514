"""The result of an analysis or a simulation: named columns over time, with units.

CSV layout: one header row of column names, then ``#`` comment lines (what produced the file,
units and sign conventions, warnings), then one row per time point. ``numpy.genfromtxt(path,
delimiter=",", names=True, comments="#")`` and ``pandas.read_csv(path, comment="#")`` read it.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..atomic import write_atomic
from ..physics.output_spec import OutputSpec

F = NDArray[Any]

SIGN_CONVENTIONS = (
    "<body>.x/.y/.theta: reference point [m] and angle [rad, CCW from world +x]; v*, omega, a*, alpha "
    "are their time derivatives",
    "<joint>.fx/.fy [N]: force the joint exerts on its SECOND body, world axes",
    "<joint>.mz [N.m]: moment the joint exerts on its second body about the joint point, CCW positive",
    "<driver>.effort: generalised force the actuator applies to the driven body "
    "(angle driver: motor torque about +z, CCW positive, N.m)",
)


@dataclass
class Result:
    """Columns over time. ``result["crank.theta"]`` is a column; ``result.time`` the times [s].

    ``status`` is 0 on success and non-zero when the run stopped early (``message`` says why);
    ``warnings`` lists conditions a user should know (redundant constraints, near-singular
    configurations).
    """

    specs: list[OutputSpec]
    data: F
    kind: str = "result"
    source: str = ""
    warnings: list[str] = field(default_factory=list)
    status: int = 0
    message: str = "ok"

    def __post_init__(self) -> None:
        self.data = np.asarray(self.data, dtype=float).reshape(-1, len(self.specs))
        self._index = {s.name: k for k, s in enumerate(self.specs)}

    @property
    def columns(self) -> list[str]:
        return [s.name for s in self.specs]

    @property
    def units(self) -> dict[str, str]:
        return {s.name: s.unit for s in self.specs}

    @property
    def time(self) -> F:
        return self["time"]

    @property
    def success(self) -> bool:
        return self.status == 0

    def __getitem__(self, name: str) -> F:
        try:
            return self.data[:, self._index[name]]
        except KeyError:
            raise KeyError(f"no column {name!r}; columns are: {', '.join(self.columns)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __len__(self) -> int:
        return self.data.shape[0]

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    def select(self, names: Sequence[str]) -> Result:
        idx = [self._index["time"]] + [self._index[n] for n in names if n != "time"]
        return Result([self.specs[i] for i in idx], self.data[:, idx], self.kind, self.source,
                      list(self.warnings), self.status, self.message)

    def to_csv(self, path: str | os.PathLike[str]) -> None:
        """Write the CSV atomically (a temporary file renamed into place); ``"-"`` is stdout."""
        buf = io.StringIO()
        self._write(buf)
        if str(path) == "-":
            sys.stdout.write(buf.getvalue())
            return
        write_atomic(path, buf.getvalue())

    def _write(self, out: io.StringIO) -> None:
        out.write(",".join(self.columns) + "\n")
        out.write(f"# mbsd-twin {self.kind}" + (f" of {self.source}" if self.source else "") + "\n")
        for line in SIGN_CONVENTIONS:
            out.write(f"# {line}\n")
        out.write("# units: " + ", ".join(f"{s.name} [{s.unit}]" for s in self.specs) + "\n")
        if self.status != 0:
            out.write(f"# status {self.status}: {self.message}\n")
        for w in self.warnings:
            out.write(f"# warning: {w}\n")
        np.savetxt(out, self.data + 0.0, delimiter=",", fmt="%.17g")  # + 0.0 turns -0 into 0


TIME_SPEC = OutputSpec("time", "s", "time")
