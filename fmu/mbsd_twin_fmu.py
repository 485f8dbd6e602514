"""PythonFMU entry script of every mbsd-twin FMU (copied into the FMU's resources).

The slave is :class:`mbsd_twin.fmi.slave.MechanismSlave`; it runs in the importing process's Python
interpreter, where mbsd-twin must be installed (see fmu/README.md). Build with
``mbsd-twin fmu build [MECHANISM.toml] -o dist/Model.fmu``.

PythonFMU 0.7.0 runs this file again at every instantiation and releases one reference to this
module's globals each time without having taken it (``findClass`` decrefs the borrowed
``PyModule_GetDict``): without the line below, the second instance in a process crashes. Each run
keeps one reference, which balances that release.

When mbsd-twin cannot be imported here, the stand-in class of ``mbsd_twin_fmu_cause.py`` (beside
this file) makes the instantiation fail with the cause on stderr (and in the host's FMI log when
debug logging is on: PythonFMU 0.7 logs nothing otherwise).
"""

try:
    from mbsd_twin.fmi.slave import MechanismSlave
except Exception as exc:  # mbsd-twin missing or broken in this interpreter
    from mbsd_twin_fmu_cause import unavailable
    from pythonfmu import Fmi2Slave

    MechanismSlave = unavailable(exc, Fmi2Slave, echo=True)

globals().setdefault("_pythonfmu_refs", []).append(globals())


class MbsdTwinFmu(MechanismSlave):
    """The FMU's slave class: the mechanism comes from the FMU's resources."""
