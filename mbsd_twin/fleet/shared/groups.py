"""Which group of shared twins holds which asset: the part the local pool (:mod:`.pool`) and the
Ray group actors (:mod:`.actors`) keep alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from ..config import AssetSpec, FleetSettings


class _Group(Protocol):
    specs: dict[str, AssetSpec]
    settings: FleetSettings


G = TypeVar("G", bound=_Group)


class Groups(Generic[G]):
    """``groups`` (each with ``specs``: asset id → spec, and ``settings``) and a serial number for
    the next group's name."""

    def __init__(self) -> None:
        self.groups: list[G] = []
        self.serial = 0

    def _of(self, asset: str) -> G | None:
        return next((g for g in self.groups if asset in g.specs), None)

    def __contains__(self, asset: str) -> bool:
        return self._of(asset) is not None

    def _with_room(self, settings: FleetSettings, usable: Callable[[G], bool] | None = None) -> G | None:
        """The first group with the same settings and room for one more twin (and ``usable(g)``)."""
        return next((g for g in self.groups if g.settings == settings and len(g.specs) < settings.twins_per_process
                     and (usable is None or usable(g))), None)
