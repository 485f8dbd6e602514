"""Engine models (``mt.MechanismBuilder``) of the reference mechanisms, shared by the tests.

Only this module of the package imports ``mbsd_twin``; the closed forms never do. The initial
guesses are the closed-form pose deliberately perturbed, so the engine has to assemble for real.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import mbsd_twin as mt

from . import four_bar as fbr
from . import slider_crank as scr

GUESS_DX = 0.01      # [m] perturbation of guessed positions
GUESS_DTH = 0.05     # [rad] perturbation of guessed angles


def slider_crank(p: scr.SliderCrank, profile: mt.Profile | None = None, *, drive: bool = True,
                 name: str = "slider_crank", theta0: float = 0.0) -> mt.Mechanism:
    """The slider crank of ``slider_crank.py`` (crank pin at crank (r, 0), rod pins (0, 0)/(l, 0)).

    The guess puts the rod horizontal on the +x side (valid even when the loop cannot close)."""
    b = mt.MechanismBuilder(name, gravity=p.gravity)
    b.body("crank", p.m1, p.I1, cg=p.c1, position=(0.0, 0.0), angle=theta0 + GUESS_DTH)
    B = p.r * np.array([np.cos(theta0), np.sin(theta0)])
    b.body("rod", p.m2, p.I2, cg=p.c2, position=tuple(B + GUESS_DX), angle=-GUESS_DTH)
    b.body("piston", p.m3, p.I3, cg=p.c3, position=(B[0] + p.l - GUESS_DX, GUESS_DX),
           angle=p.piston_angle)
    b.revolute("main_bearing", "ground", "crank", (0.0, 0.0), (0.0, 0.0))
    b.revolute("crank_pin", "crank", "rod", (p.r, 0.0), (0.0, 0.0))
    b.revolute("wrist_pin", "rod", "piston", (p.l, 0.0), (0.0, 0.0))
    b.prismatic("guide", "ground", "piston", (0.0, 0.0), (0.0, 0.0), axis=(1.0, 0.0),
                angle=p.piston_angle)
    if drive:
        b.angle_driver("motor", "crank", profile or mt.ConstantSpeed(speed=2 * np.pi, start=theta0))
    return b.build()


FOUR_BAR_INERTIA = (fbr.Inertia(0.8, 0.05, (0.4, 0.02)),     # crank
                    fbr.Inertia(2.0, 0.7, (1.0, -0.05)),     # coupler
                    fbr.Inertia(1.0, 0.09, (0.5, 0.03)))     # rocker


def four_bar(fb: fbr.FourBar, theta2_start: float, branch: int, *, speed: float = 2 * np.pi,
             duplicate_pin: bool = False, bodies: Sequence[fbr.Inertia] = FOUR_BAR_INERTIA,
             name: str = "four_bar") -> mt.Mechanism:
    """Crank (at O2), coupler (at A), rocker (at O4 = (d, 0)) with the guess near ``branch``.

    ``duplicate_pin`` adds a second, identical coupler–rocker revolute (2 redundant equations)."""
    s = fbr.solve(fb, np.array([theta2_start]), 0.0, branch=branch)
    crank, coupler, rocker = bodies
    b = mt.MechanismBuilder(name)
    b.body("crank", crank.mass, crank.inertia, crank.cg, (0.0, 0.0), theta2_start)
    b.body("coupler", coupler.mass, coupler.inertia, coupler.cg, tuple(s.A[0] + GUESS_DX),
           float(s.theta3[0]) + GUESS_DTH)
    b.body("rocker", rocker.mass, rocker.inertia, rocker.cg, (fb.d, 0.0), float(s.theta4[0]) - GUESS_DTH)
    b.revolute("O2", "ground", "crank", (0.0, 0.0), (0.0, 0.0))
    b.revolute("A", "crank", "coupler", (fb.a, 0.0), (0.0, 0.0))
    b.revolute("B", "coupler", "rocker", (fb.b, 0.0), (fb.c, 0.0))
    if duplicate_pin:
        b.revolute("B_again", "coupler", "rocker", (fb.b, 0.0), (fb.c, 0.0))
    b.revolute("O4", "ground", "rocker", (fb.d, 0.0), (0.0, 0.0))
    b.angle_driver("motor", "crank", mt.ConstantSpeed(speed=speed, start=theta2_start))
    return b.build()


PARALLELOGRAM_PIVOTS = ((0.0, 0.0), (1.2, 0.0), (0.6, 0.35))   # ground pivot of each crank
PARALLELOGRAM_CRANK = 0.5
PARALLELOGRAM_INERTIA = (fbr.Inertia(0.7, 0.02, (0.25, 0.01)),
                         fbr.Inertia(0.9, 0.03, (0.2, 0.04)),
                         fbr.Inertia(0.6, 0.015, (0.25, -0.02)))
PARALLELOGRAM_COUPLER = fbr.Inertia(1.3, 0.2, (0.6, 0.1))


def parallelogram(n_cranks: int, theta_start: float, speed: float = 2 * np.pi,
                  name: str = "parallelogram") -> mt.Mechanism:
    """Parallel cranks of length a pinned to ground at ``PARALLELOGRAM_PIVOTS`` and to a translating
    coupler (frame origin at the first crank's tip) at the same offsets. Crank 0 is driven.

    Two cranks: an ordinary (non-redundant) parallelogram four-bar. Three cranks: one redundant
    constraint equation (the third crank adds 3 coordinates and 4 equations but removes no motion).
    The third pivot is off the line of the other two, so the linkage has no change point."""
    a = PARALLELOGRAM_CRANK
    tip = a * np.array([np.cos(theta_start), np.sin(theta_start)])
    b = mt.MechanismBuilder(name)
    cp = PARALLELOGRAM_COUPLER
    b.body("coupler", cp.mass, cp.inertia, cp.cg, tuple(tip + GUESS_DX), GUESS_DTH)
    for k in range(n_cranks):
        ck = PARALLELOGRAM_INERTIA[k]
        pivot = PARALLELOGRAM_PIVOTS[k]
        b.body(f"crank{k}", ck.mass, ck.inertia, ck.cg, pivot, theta_start + GUESS_DTH)
        b.revolute(f"pivot{k}", "ground", f"crank{k}", pivot, (0.0, 0.0))
        b.revolute(f"pin{k}", f"crank{k}", "coupler", (a, 0.0), pivot)
    b.angle_driver("motor", "crank0", mt.ConstantSpeed(speed=speed, start=theta_start))
    return b.build()


def scotch_yoke(r: float, theta0: float, speed: float = 2 * np.pi) -> mt.Mechanism:
    """Crank about the ground origin, yoke sliding on the world x axis, the crank pin (r, 0) in the
    yoke's slot along the yoke's y axis (point_on_line with the line on the yoke)."""
    b = mt.MechanismBuilder("scotch_yoke")
    b.body("crank", 0.5, 2e-3, (0.03, 0.0), (0.0, 0.0), theta0 + GUESS_DTH)
    b.body("yoke", 1.2, 4e-3, (0.0, 0.0), (r * np.cos(theta0) + GUESS_DX, GUESS_DX), GUESS_DTH)
    b.revolute("bearing", "ground", "crank", (0.0, 0.0), (0.0, 0.0))
    b.prismatic("slide", "ground", "yoke", (0.0, 0.0), (0.0, 0.0), axis=(1.0, 0.0), angle=0.0)
    b.point_on_line("slot", "yoke", "crank", (0.0, 0.0), (r, 0.0), axis=(0.0, 1.0))
    b.angle_driver("motor", "crank", mt.ConstantSpeed(speed=speed, start=theta0))
    return b.build()
