"""PythonFMU entry script of every mbsd-twin FMU (copied into the FMU's resources).

The slave is :class:`mbsd_twin.fmi.slave.MechanismSlave`; it runs in the importing process's Python
interpreter, where mbsd-twin must be installed (see fmu/README.md). Build with
``mbsd-twin fmu build [MECHANISM.toml] -o dist/Model.fmu``.

PythonFMU 0.7.0 runs this file again at every instantiation and releases one reference to this
module's globals each time without having taken it (``findClass`` decrefs the borrowed
``PyModule_GetDict``): without the line below, the second instance in a process crashes. Each run
keeps one reference, which balances that release.
"""

from mbsd_twin.fmi.slave import MechanismSlave

globals().setdefault("_pythonfmu_refs", []).append(globals())


class MbsdTwinFmu(MechanismSlave):
    """The FMU's slave class: the mechanism comes from the FMU's resources."""
