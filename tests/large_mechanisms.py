"""Mechanisms of any size for the scale tests and benchmarks/bench_scale.py: an N-link pendulum
chain, N free bodies, and a ladder of hanging four-bar loops."""

from __future__ import annotations

import math

import mbsd_twin as mt


def chain(n: int, off: float = 0.0) -> mt.Mechanism:
    """n links of 0.1 m, 0.1 kg hinged end to end from the origin, laid out along +x; ``off``
    turns link i by off·(i+1) [rad] without moving it, so every joint is violated."""
    b = mt.MechanismBuilder(f"chain{n}")
    prev = "ground"
    for i in range(n):
        b.body(f"link{i}", 0.1, 0.1 * 0.01 / 12, cg=(0.05, 0.0), position=(0.1 * i, 0.0), angle=off * (i + 1))
        b.revolute(f"j{i}", prev, f"link{i}", (0.1, 0.0) if i else (0.0, 0.0), (0.0, 0.0))
        prev = f"link{i}"
    return b.build()


def free_bodies(n: int) -> mt.Mechanism:
    """n free bodies of 0.1 kg, 0.2 m apart along x (gravity, no joints)."""
    b = mt.MechanismBuilder(f"free{n}")
    for i in range(n):
        b.body(f"b{i}", 0.1, 1e-3, position=(0.2 * i, 0.0))
    return b.build()


def hanging_ladder(loops: int) -> mt.Mechanism:
    """``loops`` four-bar parallelograms stacked downwards (1 m bars, 1 kg), hanging 0.1 rad off
    the vertical: two rails of bars hinged end to end, a rung across each level; closed loops,
    one degree of freedom each (released at rest, they swing without reaching the collapsed,
    singular pose)."""
    b = mt.MechanismBuilder(f"ladder{loops}")
    below, s, c = ("ground", "ground"), math.sin(0.1), math.cos(0.1)
    for i in range(loops):
        left, right, rung = f"l{i}", f"r{i}", f"rung{i}"
        b.body(left, 1.0, 0.1, position=(i * s, -i * c), angle=-math.pi / 2 + 0.1)
        b.body(right, 1.0, 0.1, position=(1.0 + i * s, -i * c), angle=-math.pi / 2 + 0.1)
        b.revolute(f"jl{i}", below[0], left, (1.0, 0.0) if i else (0.0, 0.0), (0.0, 0.0))
        b.revolute(f"jr{i}", below[1], right, (1.0, 0.0), (0.0, 0.0))
        b.body(rung, 1.0, 0.1, position=((i + 1) * s, -(i + 1) * c))
        b.revolute(f"rl{i}", left, rung, (1.0, 0.0), (0.0, 0.0))
        b.revolute(f"rr{i}", right, rung, (1.0, 0.0), (1.0, 0.0))
        below = (left, right)
    return b.build()


def chain_toml(n: int) -> str:
    """The mechanism file (mbsd-twin/1 TOML) of ``chain(n)`` as built (off = 0), for the FMU builds."""
    parts = [f'format = "mbsd-twin/1"\nname = "chain{n}"\ngravity = [0.0, -9.81]\n']
    for i in range(n):
        parts.append(f'[[bodies]]\nname = "link{i}"\nmass = 0.1\ninertia = {0.1 * 0.01 / 12!r}\n'
                     f"cg = [0.05, 0.0]\nposition = [{0.1 * i!r}, 0.0]\nangle = 0.0\n")
    for i in range(n):
        prev, at = ("ground", "0.0") if i == 0 else (f"link{i - 1}", "0.1")
        parts.append(f'[[joints]]\nname = "j{i}"\ntype = "revolute"\nbodies = ["{prev}", "link{i}"]\n'
                     f"points = [[{at}, 0.0], [0.0, 0.0]]\n")
    return "\n".join(parts)


def driven_chain(n: int, speed: float = 0.0) -> mt.Mechanism:
    """``chain(n)`` with every link's absolute angle driven from 0 at ``speed`` [rad/s] (DOF 0:
    at 0 rad/s held horizontal, otherwise turning as one straight bar about the origin)."""
    b = mt.MechanismBuilder(f"driven-chain{n}")
    prev = "ground"
    for i in range(n):
        b.body(f"link{i}", 0.1, 0.1 * 0.01 / 12, cg=(0.05, 0.0), position=(0.1 * i, 0.0))
        b.revolute(f"j{i}", prev, f"link{i}", (0.1, 0.0) if i else (0.0, 0.0), (0.0, 0.0))
        b.angle_driver(f"d{i}", f"link{i}", mt.ConstantSpeed(speed, 0.0))
        prev = f"link{i}"
    return b.build()
