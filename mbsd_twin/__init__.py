"""mbsd-twin: planar multibody dynamics for FMI co-simulation and live digital twins."""

__all__: list[str] = []
