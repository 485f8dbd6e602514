"""The twin's history store (docs/history.md): what the service publishes, written off the sample
loop in batches to SQLite (default) or PostgreSQL, spooled to disk while the store is out.

``rows`` turns output messages into blocks and events, ``stores`` holds the two backends (schema,
write, query, retention; PostgreSQL's specifics in ``pg``), ``backends`` opens the configured one,
``spool`` the append-only outage spool, ``writer`` the writer thread the service feeds, ``export``
the ``mbsd-twin twin history`` query and export.
"""
