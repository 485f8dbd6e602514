"""mbsd-twin: planar multibody dynamics for FMI co-simulation and live digital twins.

Data flows one way: mechanism file → :class:`Mechanism` (plain data) → :class:`System`
(compiled, vectorised) → analyses and the :class:`Simulator` → the faces (CLI, FMU, twin).
"""

from .analysis import CheckReport, RedundancyWarning, check, inverse_dynamics, kinematics
from .builder import MechanismBuilder
from .errors import (
    AssemblyError,
    ConsistencyError,
    DOFError,
    MbsdError,
    MechanismError,
    PortError,
    Problem,
)
from .kinematics import KinematicsOptions, assemble
from .model import Body, Driver, Joint, Load, Mechanism
from .outputs import OutputSpec
from .profiles import Constant, ConstantSpeed, FunctionProfile, Harmonic, Polynomial, Profile, Table
from .results import Result
from .system import System, compile_mechanism

try:  # the loader is optional while it is being written
    from .loader import load_mechanism, loads_mechanism
except ImportError:  # pragma: no cover
    pass

__version__ = "0.1.0"

__all__ = [
    "AssemblyError", "Body", "CheckReport", "ConsistencyError", "Constant", "ConstantSpeed", "DOFError",
    "Driver", "FunctionProfile", "Harmonic", "Joint", "KinematicsOptions", "Load", "MbsdError",
    "Mechanism", "MechanismBuilder", "MechanismError", "OutputSpec", "Polynomial", "PortError", "Problem",
    "Profile", "RedundancyWarning", "Result", "System", "Table", "assemble", "check", "compile_mechanism",
    "inverse_dynamics", "kinematics", "load_mechanism", "loads_mechanism", "__version__",
]
