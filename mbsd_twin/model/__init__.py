"""The model layer: a mechanism as plain data (``model``), built in Python (``builder``) or read
from a TOML file (``loader``, ``toml_reader``, ``toml_guard``), checked (``validation``,
``plausibility``), with its time profiles (``profiles``) and plane curves (``surfaces``).
"""
