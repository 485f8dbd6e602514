"""The solver layer: assembly and kinematics (``kinematics``), forward dynamics with the numpy
or compiled stepper (``dynamics``), consistent initial velocities (``initial_velocity``),
the analyses behind ``check``, ``kinematics`` and ``inverse_dynamics`` (``analysis``) and their
``Result`` (``results``).
"""
