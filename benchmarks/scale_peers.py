"""Optional peers for benchmarks/bench_scale.py (issue #33): the N-link planar pendulum chain of
tests/large_mechanisms.py (0.1 m, 0.1 kg slender links hinged end to end from the origin,
released horizontal, gravity 9.81 m/s²) in Exudyn (generalised-alpha, spectral radius 0.8, the
sparse linear solver) and MuJoCo (RK4 and implicitfast), all at a fixed 1 ms step, timed over a
span of simulated time after the model is built. Used only where the package imports: neither
is a dependency of mbsd-twin (``pip install exudyn mujoco`` for the comparison)."""

from __future__ import annotations

import importlib.util
import time
from typing import Any

L, M, G, H = 0.1, 0.1, 9.81, 1e-3
J = M * L * L / 12  # about the centre of mass


def available() -> dict[str, bool]:
    return {name: importlib.util.find_spec(name) is not None for name in ("exudyn", "mujoco")}


def exudyn_per_second(n: int, span: float) -> float:
    """Wall [s] per simulated second of Exudyn's generalised-alpha on the n-link chain."""
    import exudyn as exu
    from exudyn.itemInterface import (
        LoadMassProportional,
        MarkerBodyMass,
        MarkerBodyPosition,
        NodeRigidBody2D,
        ObjectGround,
        ObjectJointRevolute2D,
        ObjectRigidBody2D,
    )

    sc = exu.SystemContainer()
    mbs = sc.AddSystem()
    ground = mbs.AddObject(ObjectGround(referencePosition=[0, 0, 0]))
    prev = mbs.AddMarker(MarkerBodyPosition(bodyNumber=ground, localPosition=[0, 0, 0]))
    for i in range(n):  # node at the link's centre, the hinges at ±L/2
        node = mbs.AddNode(NodeRigidBody2D(referenceCoordinates=[L * i + L / 2, 0, 0]))
        body = mbs.AddObject(ObjectRigidBody2D(physicsMass=M, physicsInertia=J, nodeNumber=node))
        left = mbs.AddMarker(MarkerBodyPosition(bodyNumber=body, localPosition=[-L / 2, 0, 0]))
        mbs.AddObject(ObjectJointRevolute2D(markerNumbers=[prev, left]))
        mbs.AddLoad(LoadMassProportional(markerNumber=mbs.AddMarker(MarkerBodyMass(bodyNumber=body)),
                                         loadVector=[0, -G, 0]))
        prev = mbs.AddMarker(MarkerBodyPosition(bodyNumber=body, localPosition=[L / 2, 0, 0]))
    mbs.Assemble()
    s = exu.SimulationSettings()
    s.timeIntegration.endTime = span
    s.timeIntegration.numberOfSteps = max(1, round(span / H))
    s.timeIntegration.generalizedAlpha.spectralRadius = 0.8
    s.timeIntegration.verboseMode = 0
    s.solutionSettings.writeSolutionToFile = False
    s.linearSolverType = exu.LinearSolverType.EigenSparse
    start = time.perf_counter()
    mbs.SolveDynamic(s, solverType=exu.DynamicSolverType.GeneralizedAlpha)
    return (time.perf_counter() - start) / span


def mujoco_model(n: int, integrator: str) -> Any:
    """Nested bodies with hinges about y (the chain moves in the x-z plane, gravity along −z),
    built with MjSpec (an MJCF text of 1000 nested bodies exceeds the XML parser's depth)."""
    import mujoco

    spec = mujoco.MjSpec()
    spec.option.timestep = H
    spec.option.gravity = [0.0, 0.0, -G]
    spec.option.integrator = getattr(mujoco.mjtIntegrator, f"mjINT_{integrator.upper()}")
    parent = spec.worldbody
    for i in range(n):
        body = parent.add_body(pos=[0.0 if i == 0 else L, 0.0, 0.0], mass=M, ipos=[L / 2, 0.0, 0.0],
                               inertia=[1e-12, J, J], explicitinertial=True)
        body.add_joint(type=mujoco.mjtJoint.mjJNT_HINGE, axis=[0.0, 1.0, 0.0])
        parent = body
    return spec.compile()


def mujoco_per_second(n: int, span: float, integrator: str) -> float:
    """Wall [s] per simulated second of MuJoCo (``RK4`` or ``implicitfast``) on the n-link chain."""
    import mujoco

    model = mujoco_model(n, integrator)
    data = mujoco.MjData(model)
    steps = max(1, round(span / H))
    start = time.perf_counter()
    for _ in range(steps):
        mujoco.mj_step(model, data)
    return (time.perf_counter() - start) / (steps * H)


def ratios(n: int, span: float, ours: float) -> str:
    """The peers' wall per simulated second over ours, those importable (``-`` for the others)."""
    have = available()
    out = []
    out.append(f"{exudyn_per_second(n, span) / ours:9.1f}" if have["exudyn"] else f"{'-':>9}")
    for integrator in ("RK4", "implicitfast"):
        out.append(f"{mujoco_per_second(n, span, integrator) / ours:9.1f}" if have["mujoco"] else f"{'-':>9}")
    return " ".join(out)
