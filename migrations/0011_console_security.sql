-- 0011: console sessions end with their token, a sign-in throttle every process shares, refused
-- attempts audited (contract §9; issue 21). Forward-only.

-- Which token opened the session: HMAC-SHA256 keyed by the token (domain/console.ts
-- tokenFingerprint), never the token. A session whose fingerprint is not the one of its role's
-- configured token is signed out at its next request, and deleted when a receiver starts. Sessions
-- opened before this migration have none: they end at the first start of this version.
ALTER TABLE console_sessions ADD COLUMN token_fp TEXT;

-- The sign-in throttle (was in one process's memory): wrong tokens per address since the first
-- one of the current window. A row lives one window; rows of past windows are removed as they go.
CREATE TABLE console_sign_in_failures (
  address  TEXT    PRIMARY KEY,
  since    TEXT    NOT NULL,
  failures INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX console_sign_in_failures_since ON console_sign_in_failures (since);

-- Refused attempts (a 403 for CSRF, Origin or role, a 429 throttled sign-in): action `refused`,
-- `outcome` 'refused' and `reason` (csrf, origin, role, throttled). Aggregated: repeats of one
-- refusal (same reason, route, address and session) within an hour add to `times` and move
-- `last_at` instead of adding rows, and past a cap of rows per hour the rest go to one row per
-- reason (target '*'), so refusals cannot fill the disk.
ALTER TABLE console_audit ADD COLUMN outcome TEXT;
ALTER TABLE console_audit ADD COLUMN reason TEXT;
ALTER TABLE console_audit ADD COLUMN times INTEGER NOT NULL DEFAULT 1;
ALTER TABLE console_audit ADD COLUMN last_at TEXT;
CREATE INDEX console_audit_refused ON console_audit (at) WHERE outcome = 'refused';
