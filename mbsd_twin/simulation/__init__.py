"""The simulation layer: the ``Simulator`` with named, typed ports (``ports``, ``outputs``), its
state and snapshots (``simulator_state``, ``snapshot``), live parameters, and ``simulate`` →
``Result``.
"""
