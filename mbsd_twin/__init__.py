"""mbsd-twin: planar multibody dynamics for FMI co-simulation and live digital twins.

Data flows one way: mechanism file → :class:`Mechanism` (plain data) → :class:`System`
(compiled, vectorised) → analyses and the :class:`Simulator` → the faces (CLI, FMU, twin).
"""

from .errors import (
    AssemblyError,
    ConsistencyError,
    DOFError,
    MbsdError,
    MechanismError,
    PortError,
    Problem,
)
from .estimation import Augment, Calibration, ChangeDetector, FilterConfig, GapNoise, StateEstimator, calibrate
from .model.builder import MechanismBuilder
from .model.loader import load_mechanism, loads_mechanism
from .model.model import Body, Driver, Joint, Load, Mechanism
from .model.profiles import Constant, ConstantSpeed, FunctionProfile, Harmonic, Polynomial, Profile, Table
from .physics.output_spec import OutputSpec
from .physics.system import System, compile_mechanism
from .simulation.ode_form import OdeForm, PartitionChange
from .simulation.ports import Parameter, Port
from .simulation.simulate import Event, simulate
from .simulation.simulator import Simulator
from .simulation.snapshot import Snapshot
from .solvers.analysis import CheckReport, RedundancyWarning, check, inverse_dynamics, kinematics
from .solvers.dynamics import SolverFailure, SolverOptions
from .solvers.kinematics import KinematicsOptions, assemble
from .solvers.results import Result

__version__ = "0.1.0"

__all__ = [
    "AssemblyError",
    "Body",
    "CheckReport",
    "Augment",
    "Calibration",
    "ChangeDetector",
    "ConsistencyError",
    "Constant",
    "ConstantSpeed",
    "DOFError",
    "Driver",
    "Event",
    "FilterConfig",
    "GapNoise",
    "FunctionProfile",
    "Harmonic",
    "Joint",
    "KinematicsOptions",
    "Load",
    "MbsdError",
    "Mechanism",
    "MechanismBuilder",
    "MechanismError",
    "OdeForm",
    "OutputSpec",
    "PartitionChange",
    "Parameter",
    "Polynomial",
    "Port",
    "PortError",
    "Problem",
    "Profile",
    "RedundancyWarning",
    "Result",
    "Simulator",
    "Snapshot",
    "StateEstimator",
    "SolverFailure",
    "SolverOptions",
    "System",
    "Table",
    "assemble",
    "calibrate",
    "check",
    "compile_mechanism",
    "inverse_dynamics",
    "kinematics",
    "load_mechanism",
    "loads_mechanism",
    "simulate",
    "__version__",
]
