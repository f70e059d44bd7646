-- 0011: the console's own keys: SQLite's migrations/0015_console_keys.sql (see its notes) in
-- PostgreSQL's types. Shared by every replica, so a sign-in started at one ends at another. A new
-- small table that nothing of the previous release reads or writes: safe beside it, and it takes no
-- lock that ingest waits for.
CREATE TABLE console_keys (
  name       text        PRIMARY KEY,
  secret     text        NOT NULL,
  created_at timestamptz NOT NULL
);
