"""Exceptions with structured attributes.

Validators return a list of :class:`Problem`; one :class:`MechanismError` carries them all, so a
user sees every mistake in a file at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input: ``location`` such as ``file.toml: joints[2].axis``."""

    location: str
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.message}"


class MbsdError(Exception):
    """Base class of every error this package raises on purpose."""


class MechanismError(MbsdError, ValueError):
    """The mechanism description is invalid; ``problems`` lists every problem found."""

    def __init__(self, problems: Sequence[Problem], source: str = "<api>") -> None:
        self.problems = list(problems)
        self.source = source
        n = len(self.problems)
        head = f"{source}: {n} problem{'s' if n != 1 else ''} in the mechanism description"
        super().__init__(head + "\n" + "\n".join(f"  - {p}" for p in self.problems))


class AssemblyError(MbsdError, RuntimeError):
    """Newton–Raphson could not satisfy the position constraints.

    ``residual`` is the largest |C| left, ``iterations`` the count used, ``time`` the time [s] of
    the failing point and ``worst`` the (constraint name, |C|) pairs with the largest residuals.
    ``cause`` (initial assembly): "inconsistent" (constraints that conflict, named in
    ``conflicting``), "pinned" (pinned coordinates that cannot be held, in ``conflicting``),
    "too_far" (the guess too far for the iterations), or "" (a sweep point).
    """

    def __init__(self, message: str, *, residual: float, iterations: int, time: float,
                 worst: Sequence[tuple[str, float]], cause: str = "",
                 conflicting: Sequence[str] = ()) -> None:
        self.residual = residual
        self.iterations = iterations
        self.time = time
        self.worst = list(worst)
        self.cause = cause
        self.conflicting = list(conflicting)
        detail = ", ".join(f"{n} |C|={r:.3g}" for n, r in self.worst)
        super().__init__(f"{message} at t={time:.6g} s after {iterations} iterations: "
                         f"max residual {residual:.3g}; largest: {detail}")


class DOFError(MbsdError, ValueError):
    """The analysis needs a different number of degrees of freedom than the mechanism has."""

    def __init__(self, message: str, *, dof: int, required: int) -> None:
        self.dof = dof
        self.required = required
        super().__init__(message)


class ConsistencyError(MbsdError, ValueError):
    """Initial velocities violate the velocity constraints (with ``initial_velocity='check'``).

    ``residual`` is the largest |Cq·v0 + Ct|, ``worst`` the (constraint row, residual) pairs
    largest first, ``joints`` the joints and drivers owning them.
    """

    def __init__(self, message: str, *, residual: float, worst: Sequence[tuple[str, float]] = (),
                 joints: Sequence[str] = ()) -> None:
        self.residual = residual
        self.worst = list(worst)
        self.joints = list(joints)
        super().__init__(message)


class PortError(MbsdError, KeyError):
    """Unknown port or parameter name, or a value it cannot take."""

    def __init__(self, message: str, *, name: str) -> None:
        self.name = name
        super().__init__(message)

    def __str__(self) -> str:  # KeyError quotes its message otherwise
        return str(self.args[0])


class FmuWarning(UserWarning):
    """An FMU that builds but is likely not what its user wants (no input variable: a co-simulation
    cannot drive it); ``mbsd-twin fmu build`` prints it as ``warning: …``."""


class PlausibilityWarning(UserWarning):
    """A valid but implausible value in a mechanism (a mass of 1e30 kg, a subnormal length): the
    message is ``location: why`` like a :class:`Problem`. Such values often make a simulation crawl
    or fail; see docs/mechanism-file.md for the ranges."""


class SolverFailure(MbsdError, RuntimeError):
    """The integrator could not continue; ``time`` is where it stopped."""

    def __init__(self, message: str, *, time: float) -> None:
        self.time = time
        super().__init__(message)


class CampaignError(MbsdError, ValueError):
    """A campaign file is invalid; the message names the file, the job and the key."""
