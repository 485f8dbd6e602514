"""A slider-crank rig written from scratch for the field tests: its own equations of motion (one
degree of freedom, Lagrange), integrated by scipy, with no part of the engine in it.

The mechanism is examples/mechanisms/slider_crank.toml: crank (1 kg, cg 0.05 m, 8.333e-4 kg·m²,
length r = 0.1 m) on the main bearing at the origin (viscous friction 0.05 N·m·s/rad), rod (2 kg,
cg 0.15 m from the crank pin, 0.015 kg·m², length L = 0.3 m), piston (1.5 kg) on a guide along x
through the origin, gravity −9.81 m/s² along y. With s = sin θ, c = cos θ, k = r/L:

    sin φ = −k·s, cos φ = √(1 − k²s²)           rod angle φ (the wrist stays on y = 0)
    φ' = −k·c/cos φ,  φ'' = (k·s + sin φ·φ'²)/cos φ   (' = d/dθ)
    A = r(c, s),  G2 = A + a2(cos φ, sin φ),  B = A + L(cos φ, sin φ),  G1 = a1(c, s)
    M(θ)·θ̈ + (m2·G2'·G2'' + I2·φ'·φ'' + m3·Bx'·Bx'')·θ̇² = τ − c_v·θ̇ − g·(m1·G1y' + m2·G2y') + F_p·Bx' + τ_f

with M = I1 + m1·a1² + m2·|G2'|² + I2·φ'² + m3·Bx'². The main-bearing force on the crank (the
twin's f_x, f_y) follows from Newton's laws of the three bodies: the rod and piston in x give the
crank-pin force's x part, the rod's moment about the wrist its y part, and the crank's balance

    F_O = m1·(a_G1 − g) + F_A,   F_Ax = m2·a_G2x + m3·a_Bx − F_p,
    F_Ay = (I2·φ̈ + (G2 − B) × m2·(a_G2 − g) + (A − B)_y·F_Ax) / (A − B)_x.

The motor torque is a smooth function of time (a constant plus a slow sine, with a proportional
speed controller at low speeds, where gravity would stall an open-loop crank), so the twin's
first-order hold reconstructs it to far below its sensor noise. Faults: an unmodelled torque on the
crank (a step or a ramp), a changed rod or piston mass, sensor offsets, scale errors and a stuck
speed sensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.integrate import solve_ivp

R, LROD, A1, A2 = 0.1, 0.3, 0.05, 0.15
M1, I1, M2, I2, M3 = 1.0, 8.333e-4, 2.0, 0.015, 1.5
CV, G = 0.05, 9.81
NOISE = {"theta": 1e-3, "omega": 0.01, "tau_m": 0.002, "f_x": 0.5, "f_y": 0.5}


@dataclass(frozen=True)
class Fault:
    """``kind``: ``torque`` (an unmodelled torque on the crank [N·m], against the motion: a bearing
    friction), ``rod_mass`` / ``piston_mass`` (factor), ``offset`` (a sensor's additive error in its
    unit), ``scale`` (a sensor's factor), ``stuck`` (the sensor holds its last value). It starts at
    ``onset`` [s] and reaches ``size`` after ``ramp`` s (0: a step)."""

    kind: str
    size: float
    onset: float
    channel: str = ""
    ramp: float = 0.0

    def level(self, t: np.ndarray | float) -> np.ndarray | float:
        if self.ramp > 0:
            return self.size * np.clip((np.asarray(t) - self.onset) / self.ramp, 0.0, 1.0)
        return self.size * (np.asarray(t) >= self.onset)


@dataclass(frozen=True)
class Rig:
    speed: float = 38.0  # rad/s mean crank speed
    swing: float = 0.3  # speed modulation, fraction of ``speed``
    period: float = 5.0  # s, of the modulation
    rate: float = 1000.0
    batch: int = 20
    seed: int = 0
    faults: tuple[Fault, ...] = ()
    noise: dict[str, float] = field(default_factory=lambda: dict(NOISE))

    def masses(self, t: float) -> tuple[float, float]:
        m2, m3 = M2, M3
        for f in self.faults:
            if f.kind == "rod_mass" and t >= f.onset:
                m2 = M2 * f.size
            if f.kind == "piston_mass" and t >= f.onset:
                m3 = M3 * f.size
        return m2, m3


def _geometry(th: np.ndarray) -> dict[str, np.ndarray]:
    """Positions and their first and second θ-derivatives."""
    s, c, k = np.sin(th), np.cos(th), R / LROD
    sp = -k * s
    cp = np.sqrt(1.0 - sp * sp)
    p1 = -k * c / cp
    p2 = (k * s + sp * p1 * p1) / cp
    A, A1d, A2d = R * np.array([c, s]), R * np.array([-s, c]), R * np.array([-c, -s])
    u, u1 = np.array([cp, sp]), np.array([-sp, cp])
    g = {"phi": np.arctan2(sp, cp), "p1": p1, "p2": p2, "A": A, "A1": A1d, "A2": A2d}
    for name, arm in (("G2", A2), ("B", LROD)):
        g[name] = A + arm * u
        g[name + "1"] = A1d + arm * u1 * p1
        g[name + "2"] = A2d + arm * (-u * p1 * p1 + u1 * p2)
    g["G1"], g["G11"], g["G12"] = A1 * np.array([c, s]), A1 * np.array([-s, c]), A1 * np.array([-c, -s])
    return g


class Truth:
    """The rig's true motion over [0, duration]: dense, 1e-11 relative tolerance."""

    def __init__(self, rig: Rig, duration: float) -> None:
        self.rig, self.duration = rig, duration
        self.gain = 5.0 if rig.speed < 20.0 else 0.0  # N·m·s/rad: low speeds need a speed controller
        segments = sorted({0.0, duration, *(f.onset for f in rig.faults if f.kind.endswith("mass")
                                            and 0 < f.onset < duration)})
        y0, self.sols = [0.0, rig.speed], []
        for a, b in zip(segments[:-1], segments[1:], strict=True):
            m2, m3 = rig.masses(a)
            sol = solve_ivp(self._rhs, (a, b), y0, method="DOP853", rtol=1e-11, atol=1e-12, dense_output=True,
                            args=(m2, m3))
            if not sol.success:
                raise RuntimeError(sol.message)
            self.sols.append((a, b, m2, m3, sol.sol))
            y0 = list(sol.y[:, -1])

    def set_point(self, t: np.ndarray | float) -> np.ndarray | float:
        r = self.rig
        return r.speed * (1.0 + r.swing * np.sin(2 * math.pi * np.asarray(t) / r.period))

    def motor(self, t: np.ndarray | float, omega: np.ndarray | float) -> np.ndarray | float:
        """The motor torque [N·m]: friction feed-forward of the set-point (+ speed control)."""
        w = self.set_point(t)
        return CV * w + self.gain * (w - np.asarray(omega))

    def extra_torque(self, t: np.ndarray | float, omega: np.ndarray | float) -> np.ndarray | float:
        out = 0.0 * np.asarray(t)
        for f in self.rig.faults:
            if f.kind == "torque":
                out = out - f.level(t) * np.tanh(np.asarray(omega) / 0.05)
        return out

    def _rhs(self, t: float, y: list[float], m2: float, m3: float) -> list[float]:
        """The equation of motion in scalar arithmetic (what :meth:`_alpha` does on arrays; the
        integrator calls it some 10⁵ times)."""
        th, w = y
        s, c, k = math.sin(th), math.cos(th), R / LROD
        sp = -k * s
        cp = math.sqrt(1.0 - sp * sp)
        p1 = -k * c / cp
        p2 = (k * s + sp * p1 * p1) / cp
        g2x1, g2y1 = -R * s - A2 * sp * p1, R * c + A2 * cp * p1
        g2x2 = -R * c + A2 * (-cp * p1 * p1 - sp * p2)
        g2y2 = -R * s + A2 * (-sp * p1 * p1 + cp * p2)
        bx1, bx2 = -R * s - LROD * sp * p1, -R * c + LROD * (-cp * p1 * p1 - sp * p2)
        mass = I1 + M1 * A1 ** 2 + m2 * (g2x1 ** 2 + g2y1 ** 2) + I2 * p1 ** 2 + m3 * bx1 ** 2
        conv = m2 * (g2x1 * g2x2 + g2y1 * g2y2) + I2 * p1 * p2 + m3 * bx1 * bx2
        wset = self.rig.speed * (1.0 + self.rig.swing * math.sin(2 * math.pi * t / self.rig.period))
        q = CV * wset + self.gain * (wset - w) - CV * w - G * (M1 * A1 * c + m2 * g2y1)
        for f in self.rig.faults:
            if f.kind == "torque":
                q -= float(f.level(t)) * math.tanh(w / 0.05)
        return [w, (q - conv * w * w) / mass]

    def _alpha(self, t: Any, th: Any, w: Any, g: dict[str, np.ndarray], m2: float, m3: Any) -> Any:
        mass = I1 + M1 * A1 ** 2 + m2 * (g["G21"] ** 2).sum(0) + I2 * g["p1"] ** 2 + m3 * g["B1"][0] ** 2
        conv = m2 * (g["G21"] * g["G22"]).sum(0) + I2 * g["p1"] * g["p2"] + m3 * g["B1"][0] * g["B2"][0]
        q = self.motor(t, w) - CV * w - G * (M1 * g["G11"][1] + m2 * g["G21"][1]) + self.extra_torque(t, w)
        return (q - conv * w * w) / mass

    def state(self, t: np.ndarray) -> dict[str, np.ndarray]:
        """θ, ω, α, the motor torque and the bearing force on the crank at the times ``t``."""
        th, w, m2, m3 = (np.empty_like(t) for _ in range(4))
        for a, b, m2_, m3_, sol in self.sols:
            sel = (t >= a) & (t <= b)
            th[sel], w[sel] = sol(t[sel])
            m2[sel], m3[sel] = m2_, m3_
        g = _geometry(th)
        al = self._alpha(t, th, w, g, m2, m3)

        def acc(name: str) -> np.ndarray:
            return g[name + "1"] * al + g[name + "2"] * w * w
        a_g1, a_g2, a_b = acc("G1"), acc("G2"), acc("B")
        phi_dd = g["p1"] * al + g["p2"] * w * w
        grav = np.array([0.0, -G])[:, None]
        fax = m2 * a_g2[0] + m3 * a_b[0]
        ab, gb = g["A"] - g["B"], g["G2"] - g["B"]
        rel = m2 * (a_g2 - grav)
        fay = (I2 * phi_dd + gb[0] * rel[1] - gb[1] * rel[0] + ab[1] * fax) / ab[0]
        fo = M1 * (a_g1 - grav) + np.array([fax, fay])
        return {"theta": th, "omega": w, "alpha": al, "tau_m": np.asarray(self.motor(t, w)), "f_x": fo[0],
                "f_y": fo[1]}


def messages(rig: Rig, duration: float, asset: str = "sc-01") -> tuple[list[dict[str, Any]], Truth]:
    """The rig's sensor messages (contract v1, noise and sensor faults applied) and its truth."""
    truth = Truth(rig, duration)
    n = int(round(duration * rig.rate))
    t = np.arange(n) / rig.rate
    true = truth.state(t)
    rng = np.random.default_rng(rig.seed)
    meas = {ch: true[ch] + rng.normal(0.0, rig.noise.get(ch, 0.0), n) for ch in ("theta", "omega", "tau_m", "f_x",
                                                                                 "f_y")}
    for f in rig.faults:
        if f.kind == "offset":
            meas[f.channel] = meas[f.channel] + f.level(t)
        elif f.kind == "scale":
            meas[f.channel] = meas[f.channel] * (1.0 + f.level(t))
        elif f.kind == "stuck":
            k0 = int(round(f.onset * rig.rate))
            meas[f.channel][k0:] = meas[f.channel][k0 - 1]
    msgs = []
    for seq, k in enumerate(range(0, n - rig.batch + 1, rig.batch)):
        msgs.append({"v": 1, "asset": asset, "seq": seq, "t0": float(t[k]), "dt": 1.0 / rig.rate, "n": rig.batch,
                     "ch": {ch: [float(x) for x in v[k:k + rig.batch]] for ch, v in meas.items()}})
    return msgs, truth


def with_faults(rig: Rig, *faults: Fault) -> Rig:
    return replace(rig, faults=tuple(faults))
