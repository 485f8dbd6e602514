"""The cam joint: derivatives against finite differences, extra coordinates, lift against geometry.

Expected numbers come from closed forms (eccentric disc and flat follower: y = e·sin θ + R), from
an engine-independent geometric construction (pitch curve of a polar cam intersected with the
follower's circle), and from a minimal-coordinate Lagrangian ODE integrated by scipy.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.integrate as si
from scipy.optimize import brentq

import mbsd_twin as mt
from mbsd_twin.model.model import Joint
from mbsd_twin.model.surfaces import Circle, Graph, Line, Polar, Polynomial, Spline, Surface
from mbsd_twin.solvers.dynamics import Dynamics, Stepper
from mbsd_twin.solvers.kinematics import sweep

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "mechanisms"
H = 1e-6
RTOL = 1e-7

POLAR = Polar(fourier=(0.1, 0.02, 0.01, 0.0, 0.005))
POLAR_TABLE = Polar(angles=(0.0, 1.0, 2.2, 3.5, 4.6, 5.5), radii=(0.1, 0.12, 0.11, 0.09, 0.1, 0.105))
SPLINE_CLOSED = Spline(((0.1, 0.0), (0.0, 0.12), (-0.1, 0.0), (0.0, -0.08)), closed=True)
SPLINE_OPEN = Spline.graph((-0.3, -0.1, 0.05, 0.2, 0.4), (0.0, 0.03, -0.02, 0.01, 0.04))
PAIRS: dict[str, tuple[Surface, Surface]] = {
    "polar-circle": (POLAR, Circle(0.03, (0.01, -0.02))),
    "polar_table-line": (POLAR_TABLE, Line((0.02, 0.01), (0.6, 0.8))),
    "circle-line": (Circle(0.05, (0.02, 0.0)), Line((0.0, 0.0), (1.0, 0.0))),
    "polynomial-circle": (Polynomial((0.01, 0.2, -0.5, 0.8)), Circle(0.04)),
    "closed_spline-circle": (SPLINE_CLOSED, Circle(0.02, (0.0, 0.01))),
    "open_spline-polar": (SPLINE_OPEN, POLAR),
    "graph-circle": (Graph(lambda x: (0.03 * np.sin(4 * x), 0.12 * np.cos(4 * x), -0.48 * np.sin(4 * x),
                                      -1.92 * np.cos(4 * x))), Circle(0.05, (0.0, 0.02))),
}


def two_bodies(first: str = "a", second: str = "b") -> mt.MechanismBuilder:
    b = mt.MechanismBuilder("cam-test")
    b.body("a", 1.0, 0.1, (0.1, 0.05), (0.3, -0.2), 0.4)
    b.body("b", 2.0, 0.2, (-0.05, 0.1), (0.5, 0.1), -0.7)
    return b


def with_cam(b: mt.MechanismBuilder, name: str, first: str, second: str, surfaces: tuple[Surface, Surface],
             parameters: tuple[float, float] | None = None) -> mt.MechanismBuilder:
    b._joints.append(Joint(name, "cam", (first, second), surfaces=surfaces, parameters=parameters))
    return b


def fd_check(system: mt.System, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = system.n_coord
    for _ in range(4):
        q, v, t = system.q0 + rng.normal(0.0, 0.4, n), rng.normal(0.0, 1.0, n), 0.3
        fd = np.column_stack([(system.constraints(q + H * e, t) - system.constraints(q - H * e, t)) / (2 * H)
                              for e in np.eye(n)])
        Cq = system.jacobian(q, t)
        np.testing.assert_allclose(Cq, fd, rtol=RTOL, atol=RTOL * max(1.0, np.abs(fd).max()))

        def rate(s: float, q: np.ndarray = q, v: np.ndarray = v, t: float = t) -> np.ndarray:
            return system.jacobian(q + v * s, t + s) @ v + system.ct(q + v * s, t + s)

        expected = -(rate(H) - rate(-H)) / (2 * H)
        np.testing.assert_allclose(system.gamma(q, v, t), expected, rtol=1e-6,
                                   atol=1e-6 * max(1.0, np.abs(expected).max()))


@pytest.mark.parametrize("pair", list(PAIRS), ids=list(PAIRS))
@pytest.mark.parametrize("bodies", [("a", "b"), ("ground", "b"), ("a", "ground")], ids=["bodies", "ground1", "ground2"])
def test_cam_jacobian_and_gamma_against_finite_differences(pair: str, bodies: tuple[str, str]) -> None:
    system = mt.compile_mechanism(with_cam(two_bodies(), "c", *bodies, PAIRS[pair]).build())
    fd_check(system, seed=len(pair))


def test_two_cams_and_a_revolute_share_the_extended_columns() -> None:
    b = with_cam(two_bodies(), "c1", "a", "b", PAIRS["polar-circle"])
    with_cam(b, "c2", "ground", "a", PAIRS["circle-line"])
    b.revolute("pin", "ground", "b", (0.2, 0.3), (0.0, 0.1))
    system = mt.compile_mechanism(b.build())
    assert system.n_coord == 10
    assert system.coordinate_names[6:] == ["c1.s1", "c1.s2", "c2.s1", "c2.s2"]
    fd_check(system, seed=3)
    M = system.mass_matrix(system.q0)
    assert M.shape == (10, 10) and np.all(M[6:] == 0.0) and np.all(M[:, 6:] == 0.0)
    Q = system.forces(system.q0, np.ones(10))
    assert np.all(Q[6:] == 0.0)


def test_default_parameter_guess_is_the_closest_pair_of_points() -> None:
    # circle of radius 0.05 centred on a's reference point (0.3, −0.2), θa = 0.4; line through b's
    # reference point (0.5, 0.1) along θb = −0.7. The centre is on the line's −n side
    # (n = (−sin θb, cos θb)), so the closest circle point is centre + 0.05·n, at world angle
    # θb + π/2, i.e. circle parameter θb + π/2 − θa; s2 is its abscissa along the line.
    system = mt.compile_mechanism(with_cam(two_bodies(), "c", "a", "b", (Circle(0.05), Line())).build())
    s1, s2 = system.q0[6:]
    n = np.array([-math.sin(-0.7), math.cos(-0.7)])
    u = np.array([math.cos(-0.7), math.sin(-0.7)])
    centre = np.array([0.3, -0.2])
    assert n @ (centre - [0.5, 0.1]) < 0
    assert math.remainder(s1 - (-0.7 + math.pi / 2 - 0.4), 2 * math.pi) == pytest.approx(0.0, abs=math.pi / 720)
    assert s2 == pytest.approx(u @ (centre + 0.05 * n - [0.5, 0.1]), abs=1e-3)


def eccentric_cam(e: float = 0.02, R: float = 0.05, driven: bool = True) -> mt.Mechanism:
    """Disc of radius R, centre e from the cam pivot (world origin); a flat-faced follower sliding
    along world y, its face the follower's local x axis."""
    b = mt.MechanismBuilder("eccentric-cam")
    b.body("cam", 0.8, 1.5e-3, position=(0.0, 0.0))
    b.body("follower", 0.3, 1e-3, position=(0.0, R + 0.01))
    b.revolute("bearing", "ground", "cam", (0.0, 0.0), (0.0, 0.0))
    b.prismatic("guide", "ground", "follower", (0.0, 0.0), (0.0, 0.0), axis=(0.0, 1.0))
    with_cam(b, "contact", "cam", "follower", (Circle(R, (e, 0.0)), Line()))
    if driven:
        b.angle_driver("motor", "cam", mt.ConstantSpeed(2 * math.pi))
    return b.build()


def test_flat_follower_lift_on_eccentric_disc_is_closed_form() -> None:
    e, R, w = 0.02, 0.05, 2 * math.pi
    t = np.linspace(0.0, 1.0, 41)
    res = mt.kinematics(eccentric_cam(e, R), t)
    th = w * t
    np.testing.assert_allclose(res["follower.y"], R + e * np.sin(th), atol=1e-12)
    np.testing.assert_allclose(res["follower.vy"], e * w * np.cos(th), atol=1e-10)
    np.testing.assert_allclose(res["follower.ay"], -e * w**2 * np.sin(th), atol=1e-8)
    system = mt.compile_mechanism(eccentric_cam(e, R))
    q = mt.assemble(system, None, 0.25)             # θ = π/2: contact at the top of the disc
    s1, s2 = q[6:]
    assert math.remainder(s1 - (math.pi / 2 - math.pi / 2), 2 * math.pi) == pytest.approx(0.0, abs=1e-12)
    assert s2 == pytest.approx(e * math.cos(math.pi / 2), abs=1e-12)


def test_free_eccentric_cam_matches_lagrangian_ode() -> None:
    """Undriven cam with a follower resting on it under gravity: θ from
    (I + m e² cos²θ)·θ'' − m e² sinθ cosθ·θ'² + m g e cosθ = 0 (T = ½Iθ'² + ½m(e cosθ θ')²,
    V = m g (R + e sinθ))."""
    e, R, g = 0.02, 0.05, 9.81
    mech = eccentric_cam(e, R, driven=False)
    contact = dataclasses.replace(mech.joint("contact"), parameters=(math.pi / 2 - 0.3, e * math.cos(0.3)))
    joints = tuple(contact if j.name == "contact" else j for j in mech.joints)
    mech = mt.Mechanism(mech.name, (mt.Body("cam", 0.8, 1.5e-3, angle=0.3),
                                    mt.Body("follower", 0.3, 1e-3, position=(0.0, R + e * math.sin(0.3)))),
                        joints, (), (), mech.gravity)
    inertia, m = 1.5e-3, 0.3

    def ode(_t: float, y: np.ndarray) -> list[float]:
        th, w = y
        c, s = math.cos(th), math.sin(th)
        return [w, (m * e * e * s * c * w * w - m * g * e * c) / (inertia + m * e * e * c * c)]

    times = np.linspace(0.0, 0.6, 13)
    ref = si.solve_ivp(ode, (0, times[-1]), [0.3, 0.0], rtol=1e-11, atol=1e-12, dense_output=True)
    system = mt.compile_mechanism(mech)
    # the numpy forward-dynamics path directly (saddle point with the massless extra coordinates)
    dyn = Dynamics(system, mt.SolverOptions(rtol=1e-9, atol=1e-11))
    stepper = Stepper(dyn, 0.0, dyn.initial_state(0.0), {})
    n = system.n_coord
    assert stepper.y[2] == pytest.approx(0.3, abs=1e-12)  # consistent guess: assembly keeps θ0
    energy0 = None
    for tk in times[1:]:
        stepper.advance_to(float(tk))
        q, v = stepper.y[:n], stepper.y[n:2 * n]
        th = ref.sol(tk)[0]
        assert q[2] == pytest.approx(th, abs=2e-7)
        assert q[4] == pytest.approx(R + e * math.sin(th), abs=1e-9)
        energy = system.kinetic_energy_batch(q[None], v[None])[0] + system.gravitational_energy_batch(q[None])[0]
        energy0 = energy if energy0 is None else energy0
        assert energy == pytest.approx(energy0, abs=1e-9)


def pitch_point(cam: Polar, rho: float, phi: float, theta: float) -> np.ndarray:
    """Roller centre for contact at cam parameter φ: r(φ)e(φ) + ρ·n_out, rotated by θ."""
    p, d1, _, _ = cam.curve(np.array([phi]))
    n_out = np.array([d1[0, 1], -d1[0, 0]]) / np.linalg.norm(d1[0])
    pc = p[0] + rho * n_out
    c, s = math.cos(theta), math.sin(theta)
    return np.array([c * pc[0] - s * pc[1], s * pc[0] + c * pc[1]])


def test_angular_follower_angle_against_pitch_curve_geometry() -> None:
    mech = mt.load_mechanism(EXAMPLES / "cam_follower.toml")
    cam = Polar(fourier=(0.05, 0.008, 0.0, 0.003, 0.0))
    rho, L, pivot = 0.012, 0.07, np.array([0.11, 0.06])
    t = np.linspace(0.0, 1.0, 25)
    res = mt.kinematics(mech, t)
    phi = 0.8771  # the branch at θ = 0 (see the example file)
    grid = np.linspace(-0.6, 0.6, 121)
    for k, tk in enumerate(t):
        th = 2 * math.pi * tk

        def f(x: float, th: float = th) -> float:
            return float(np.linalg.norm(pitch_point(cam, rho, x, th) - pivot) - L)

        vals = [f(phi + d) for d in grid]
        roots = [brentq(f, phi + a, phi + b, xtol=1e-14) for a, b, fa, fb in
                 zip(grid[:-1], grid[1:], vals[:-1], vals[1:], strict=True) if fa * fb < 0]
        phi = min(roots, key=lambda x: abs(x - phi))
        c = pitch_point(cam, rho, phi, th) - pivot
        psi = math.atan2(c[1], c[0])
        assert math.remainder(res["follower.theta"][k] - psi, 2 * math.pi) == pytest.approx(0.0, abs=1e-9)
    lift = res["follower.theta"].max() - res["follower.theta"].min()
    assert lift == pytest.approx(0.3997, abs=2e-3)  # swing of the arm over a turn (from the loop above)


def cross2(a: np.ndarray, b: np.ndarray) -> float:
    return float(a[0] * b[1] - a[1] * b[0])


def test_cam_contact_force_is_normal_and_balances_the_follower() -> None:
    """Inverse dynamics: the reaction on the follower is along the common normal (roller centre −
    contact point), and the follower's moment balance about its pivot holds:
    I_O·ψ'' = τ_spring + τ_gravity + (P_c − O) × F."""
    mech = mt.load_mechanism(EXAMPLES / "cam_follower.toml")
    system = mt.compile_mechanism(mech)
    t = np.linspace(0.0, 1.0, 11)
    res = mt.inverse_dynamics(system, t)
    q_all = sweep(system, t).q             # with the extra coordinates
    fol = mech.body("follower")
    pivot = np.array([0.11, 0.06])
    for k in range(len(t)):
        psi, s2 = q_all[k, 5], q_all[k, 7]
        centre = pivot + 0.07 * np.array([math.cos(psi), math.sin(psi)])
        pc = centre + 0.012 * np.array([math.cos(psi + s2), math.sin(psi + s2)])
        F = np.array([res["contact.fx"][k], res["contact.fy"][k]])
        normal = (centre - pc) / 0.012
        assert abs(cross2(F, normal)) < 1e-9 * np.linalg.norm(F)
        assert F @ normal > 0  # the cam pushes the roller away: compressive contact
        tau = -2.0 * (psi + 2.6) - fol.mass * 9.81 * 0.035 * math.cos(psi) + cross2(pc - pivot, F)
        I_O = fol.inertia + fol.mass * 0.035**2
        assert I_O * res["follower.alpha"][k] == pytest.approx(tau, abs=1e-9)


def test_cam_in_a_file_and_its_mistakes() -> None:
    text = (EXAMPLES / "cam_follower.toml").read_text()
    mech = mt.loads_mechanism(text)
    assert isinstance(mech.joint("contact").surfaces[0], Polar)
    assert mech.joint("contact").parameters == (0.88, 0.0)
    bad = text.replace('radius = 0.012, center', 'radius = -0.012, centre').replace(
        'fourier = [0.05, 0.008, 0.0, 0.003, 0.0]', 'fourier = [0.05, 0.008]')
    with pytest.raises(mt.MechanismError) as err:
        mt.loads_mechanism(bad, "cam.toml")
    where = sorted(p.location for p in err.value.problems)
    assert where == ["cam.toml: joints[2] (contact).surfaces[0].fourier",
                     "cam.toml: joints[2] (contact).surfaces[1].centre"]
