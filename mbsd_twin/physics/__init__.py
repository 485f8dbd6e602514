"""The physics layer: a Mechanism compiled into a ``System`` (index maps, mass matrix) whose
elements are written once: constraint rows by kind (``kernels``; cam, knife edge in ``cam``,
``nonholonomic``), generalised forces by kind (``loads``, ``load_base``; ``contact``, ``frames``), the output
columns each element offers (``output_spec``, ``outputs``).
A new joint or load kind starts here (see docs/architecture.md).
"""
