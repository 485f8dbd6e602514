"""FMI 2.0 and 3.0 co-simulation export of mechanisms (PythonFMU, pythonfmu3) and its validation harness.

- :mod:`mbsd_twin.fmi.build`: ``build_fmu(mechanism, dest)`` (needs pythonfmu);
- :mod:`mbsd_twin.fmi.slave`: the slave class, a thin layer over :class:`mbsd_twin.Simulator`;
- :mod:`mbsd_twin.fmi.native_build` and :mod:`mbsd_twin.fmi.worker`: the host-independent FMU
  (``build_fmu(..., host_independent=True)``, ``build_fmu3(..., host_independent=True)``: a C library
  from ``native_fmu/`` that runs the model in a worker process, for hosts without Python);
- :mod:`mbsd_twin.fmi.validation`: fmpy checks and FMU-versus-native comparison (needs fmpy);
- :mod:`mbsd_twin.fmi.variables`, :mod:`mbsd_twin.fmi.units`, :mod:`mbsd_twin.fmi.modeldescription`:
  the variable table, SI units and the modelDescription post-processor.

Nothing is imported here, so that importing the package needs neither pythonfmu nor fmpy.
"""
