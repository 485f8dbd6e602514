"""What the twin keeps beyond its process: the history of its topics (:mod:`.history`), checkpoints
of its core (:mod:`.checkpoint`: the state, its check, its store under a lease in SQLite or
PostgreSQL) and the PostgreSQL schema lock both use (:mod:`.pg_schema`).

Storage persists the twin: it imports the twin's configuration and core; of the twin only the
service (which writes the history) and the command line import storage (docs/architecture.md)."""
