-- Run once by the postgres image at the first start (docker-entrypoint-initdb.d), as POSTGRES_USER
-- (twin, the history writer): a read-only login for Grafana. The twin creates its tables later,
-- so SELECT is granted by default on whatever twin creates in schema public.
\set reader_password `echo "$GRAFANA_DB_PASSWORD"`
CREATE ROLE grafana LOGIN PASSWORD :'reader_password';
GRANT USAGE ON SCHEMA public TO grafana;
ALTER DEFAULT PRIVILEGES FOR ROLE twin IN SCHEMA public GRANT SELECT ON TABLES TO grafana;
-- The samples view's row estimates are large (one row per sample): without this, PostgreSQL JIT-
-- compiles each panel query (~0.1-0.3 s) before reading a few thousand rows.
ALTER ROLE grafana SET jit = off;
