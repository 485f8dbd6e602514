"""Post-process the modelDescription.xml that PythonFMU writes (FMI 2.0).

PythonFMU writes no units, no declared types, no InitialUnknowns and start values with 16 digits.
:func:`postprocess` rewrites the document from the FMU variable table so that

- every Real has its unit (``<UnitDefinitions>`` with SI base-unit exponents) and, where one
  applies, a declared type (``<TypeDefinitions>``: Angle, Torque, Force …);
- every variable states causality, variability and (where allowed) ``initial`` explicitly:
  parameters ``exact``, outputs ``calculated`` (no start), inputs no ``initial`` (FMI 2.0 §2.2.7);
- start values are written with ``repr`` (shortest exact round trip);
- ``generationTool`` names mbsd-twin and its version, then the tool that wrote the document
  (PythonFMU, pythonfmu3) in parentheses;
- ``<ModelStructure>`` lists every output in ``<Outputs>`` with its dependencies on the inputs
  (accelerations and reactions depend directly on them, positions, velocities, energy and the
  residual do not) and every output in ``<InitialUnknowns>`` (FMI 2.0 §2.2.8).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence

from .. import __version__
from .units import DECLARED_TYPES, DISPLAY_UNITS, declared_type, parse_unit
from .variables import FmuVariable

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# Children of <fmiModelDescription> in schema order (FMI 2.0).
FMI2_ORDER = ("ModelExchange", "CoSimulation", "UnitDefinitions", "TypeDefinitions", "LogCategories",
          "DefaultExperiment", "VendorAnnotations", "ModelVariables", "ModelStructure")


def naming_convention(names: Sequence[str]) -> str:
    """``structured`` when every name is a dotted identifier, else ``flat``."""
    return "structured" if all(_IDENT.match(n) for n in names) else "flat"


def unit_definitions(units: Sequence[str]) -> ET.Element:
    """<UnitDefinitions> with SI base-unit exponents (and display units) for ``units``."""
    node = ET.Element("UnitDefinitions")
    for name in units:
        unit = ET.SubElement(node, "Unit", {"name": name})
        ET.SubElement(unit, "BaseUnit", {k: str(e) for k, e in parse_unit(name).exponents.items()})
        if name in DISPLAY_UNITS:
            display, factor = DISPLAY_UNITS[name]
            ET.SubElement(unit, "DisplayUnit", {"name": display, "factor": repr(factor)})
    return node


def type_definitions(units: Sequence[str]) -> ET.Element | None:
    node = ET.Element("TypeDefinitions")
    for unit in units:
        if unit in DECLARED_TYPES:
            name, quantity = DECLARED_TYPES[unit]
            simple = ET.SubElement(node, "SimpleType", {"name": name})
            ET.SubElement(simple, "Real", {"quantity": quantity, "unit": unit})
    return node if len(node) else None


def fix_variable(sv: ET.Element, var: FmuVariable) -> None:
    sv.set("causality", var.causality)
    sv.set("variability", var.variability)
    if var.causality == "input":
        sv.attrib.pop("initial", None)
    else:
        sv.set("initial", var.initial)
    if var.description:
        sv.set("description", var.description)
    real = sv.find("Real")
    if real is None:
        raise ValueError(f"variable {var.name!r} is not a Real")
    real.attrib.clear()
    dtype = declared_type(var.unit)
    if dtype:
        real.set("declaredType", dtype)
    real.set("unit", var.unit)
    if var.causality != "output" and var.start is not None:
        real.set("start", repr(float(var.start)))


def _model_structure(variables: Sequence[FmuVariable]) -> ET.Element:
    node = ET.Element("ModelStructure")
    index = {v.name: k + 1 for k, v in enumerate(variables)}
    inputs = [str(index[v.name]) for v in variables if v.causality == "input"]
    outputs = [v for v in variables if v.causality == "output"]
    if outputs:
        out_node = ET.SubElement(node, "Outputs")
        for v in outputs:
            deps = inputs if v.feedthrough else []
            ET.SubElement(out_node, "Unknown", {"index": str(index[v.name]), "dependencies": " ".join(deps),
                                                "dependenciesKind": " ".join("dependent" for _ in deps)})
        init_node = ET.SubElement(node, "InitialUnknowns")
        for v in outputs:
            ET.SubElement(init_node, "Unknown", {"index": str(index[v.name])})
    return node


def postprocess(xml: bytes, variables: Sequence[FmuVariable]) -> bytes:
    """The modelDescription ``xml`` rewritten as described in the module docstring.

    ``variables`` must be the table the slave registered, in registration order."""
    root = ET.fromstring(xml)
    mv = root.find("ModelVariables")
    if mv is None:
        raise ValueError("modelDescription.xml has no ModelVariables")
    svs = mv.findall("ScalarVariable")
    names = [sv.get("name") for sv in svs]
    if names != [v.name for v in variables]:
        raise ValueError("modelDescription.xml variables do not match the FMU variable table")
    for sv, var in zip(svs, variables, strict=True):
        fix_variable(sv, var)
    root.set("variableNamingConvention", naming_convention([v.name for v in variables]))
    units = sorted({v.unit for v in variables})
    extra = {"UnitDefinitions": unit_definitions(units), "TypeDefinitions": type_definitions(units),
             "ModelStructure": _model_structure(variables)}
    return assemble(root, extra, FMI2_ORDER)


def generation_tool(original: str | None) -> str:
    """``mbsd-twin <version>``, followed by the tool that wrote the document in parentheses."""
    own = f"mbsd-twin {__version__}"
    if not original or original.startswith(own):
        return original or own
    return f"{own} ({original})"


def assemble(root: ET.Element, extra: dict[str, ET.Element | None], order: Sequence[str]) -> bytes:
    """``root`` with the ``extra`` children added or replaced, every child in the schema ``order``,
    and ``generationTool`` naming mbsd-twin, serialised as indented UTF-8 XML."""
    root.set("generationTool", generation_tool(root.get("generationTool")))
    children = {child.tag: child for child in root}
    children.update({k: v for k, v in extra.items() if v is not None})
    for child in list(root):
        root.remove(child)
    for tag in order:
        if tag in children:
            root.append(children[tag])
    ET.indent(root, space="  ")
    return ET.tostring(root, encoding="UTF-8", xml_declaration=True)
