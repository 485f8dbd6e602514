"""Checkpoints of a twin's core: its state as bytes that survive the process (:mod:`.state`),
checked whole before anything of a row is applied (:mod:`.check`), kept per asset under a lease in
SQLite or PostgreSQL (:mod:`.store`)."""
