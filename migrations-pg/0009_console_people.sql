-- 0009: operators sign in with the lender's identity provider: SQLite's
-- migrations/0013_console_people.sql (see its notes) in PostgreSQL's types. Shared by every replica,
-- as the sessions are.
ALTER TABLE console_sessions ADD COLUMN subject text;
ALTER TABLE console_sessions ADD COLUMN name text;
ALTER TABLE console_sessions ADD COLUMN email text;

ALTER TABLE console_audit ADD COLUMN person text;
