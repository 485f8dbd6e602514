"""Large mechanisms (issue #33): changing one parameter of a large mechanism and re-checking its
item (``ports._replace_item``, ``validation.item_problems``, as the standalone FMU's build does for
every parameter) finds the item by the section's remembered index instead of a pass over all
items: the same mechanism and the same problems as the pass, also where a name repeats (the
pass itself then), and a cost per parameter that hardly grows with the number of bodies."""

from __future__ import annotations

import dataclasses
import time

from large_mechanisms import chain

from mbsd_twin.model.model import positions
from mbsd_twin.model.validation import _Checker, item_problems
from mbsd_twin.simulation.ports import _replace_item, model_parameters


def _naive_problems(mech, name):  # noqa: ANN001, ANN202
    """item_problems as a pass over every item (the code before the index)."""
    c = _Checker(mech)
    for items, check in ((mech.bodies, c.body), (mech.joints, c.joint), (mech.loads, c.load)):
        for i, it in enumerate(items):
            if it.name == name:
                check(i, it)
    return c.problems


def test_replacing_one_item_is_the_pass_over_all() -> None:
    mech = chain(50)
    table = model_parameters(mech)
    for name, value in (("link7.mass", -1.0), ("link0.cg_y", 0.3), ("j49.p1_x", 0.0), ("j3.viscous_friction", -2.0)):
        changed = table[name][1](mech, value)
        item = name.rpartition(".")[0]
        attr = "bodies" if item.startswith("link") else "joints"
        by_pass = tuple(dataclasses.replace(it) if it.name == item else it for it in getattr(mech, attr))
        assert getattr(changed, attr) != by_pass  # the value did change
        assert [it.name for it in getattr(changed, attr)] == [it.name for it in by_pass]
        assert positions(getattr(changed, attr)) == positions(by_pass)  # shared index, the same places
        assert item_problems(changed, item) == _naive_problems(changed, item)
    assert item_problems(table["link7.mass"][1](mech, -1.0), "link7")  # a negative mass is reported


def test_a_repeated_name_takes_the_pass() -> None:
    mech = chain(5)
    twin = dataclasses.replace(mech.bodies[3], name="link1")
    dup = dataclasses.replace(mech, bodies=(*mech.bodies[:3], twin, *mech.bodies[4:]))
    assert positions(dup.bodies) is None
    changed = _replace_item(dup, "bodies", "link1", mass=-1.0)
    assert [b.mass for b in changed.bodies if b.name == "link1"] == [-1.0, -1.0]  # every item of that name
    assert item_problems(changed, "link1") == _naive_problems(changed, "link1")
    assert len(item_problems(changed, "link1")) == 2
    assert dup.body("link1") is dup.bodies[1]  # the first of that name


def test_unknown_body_of_a_joint_is_still_reported() -> None:
    mech = chain(20)
    changed = _replace_item(mech, "joints", "j5", bodies=("link4", "nolink"))
    problems = item_problems(changed, "j5")
    assert problems == _naive_problems(changed, "j5")
    assert any("unknown body 'nolink'" in p.message for p in problems)


def _per_parameter(n: int, naive: bool) -> float:
    """Seconds per (change, re-check) of a body's mass of an n-link chain, over every body; with
    ``naive`` by passes over all items (the code before the index)."""
    mech = chain(n)
    table = model_parameters(mech)
    start = time.perf_counter()
    for i in range(n):
        item = f"link{i}"
        if naive:
            bodies = tuple(dataclasses.replace(b, mass=-1.0) if b.name == item else b for b in mech.bodies)
            _naive_problems(dataclasses.replace(mech, bodies=bodies), item)
        else:
            item_problems(table[f"{item}.mass"][1](mech, -1.0), item)
    return (time.perf_counter() - start) / n


def test_the_cost_per_parameter_hardly_grows_with_the_bodies() -> None:
    """At 2,000 bodies 0.1 ms per parameter (mostly the copy of the tuple of bodies, in C)
    against 1.1 ms by the passes; at 100 bodies 18 us against 26 us (load 4-6 on 2 cores)."""
    fast, slow = (min(_per_parameter(2000, naive) for _ in range(3)) for naive in (False, True))
    assert fast < slow / 2
