-- 0005: console sessions end with their token, a sign-in throttle every replica shares, refused
-- attempts audited: SQLite's migrations/0011_console_security.sql (see its notes) in PostgreSQL's
-- types. Shared by every replica: a replica started with a rotated token deletes the sessions of
-- the old one for all of them, and the throttle counts an address's wrong tokens at any replica.
ALTER TABLE console_sessions ADD COLUMN token_fp text;

CREATE TABLE console_sign_in_failures (
  address  text        PRIMARY KEY,
  since    timestamptz NOT NULL,
  failures integer     NOT NULL
);
CREATE INDEX console_sign_in_failures_since ON console_sign_in_failures (since);

ALTER TABLE console_audit ADD COLUMN outcome text;
ALTER TABLE console_audit ADD COLUMN reason text;
ALTER TABLE console_audit ADD COLUMN times integer NOT NULL DEFAULT 1;
ALTER TABLE console_audit ADD COLUMN last_at timestamptz;
CREATE INDEX console_audit_refused ON console_audit (at) WHERE outcome = 'refused';
