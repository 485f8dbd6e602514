"""The standalone FMU: engine and mechanism in one shared library, no Python at run time
(``mbsd-twin fmu build --standalone``; see :mod:`.build` and fmu/README.md)."""

from .build import build_standalone

__all__ = ["build_standalone"]
