-- 0008: the operator console (contract §9). Forward-only.

-- One row per signed-in browser. The session id itself (32 random bytes) lives only in the
-- `consig_console` cookie; the table keeps its SHA-256, so a copy of the database signs no one in.
-- In SQLite, not in memory: sessions survive a restart and a hand-over to a standby.
CREATE TABLE console_sessions (
  id_hash    TEXT PRIMARY KEY,
  role       TEXT NOT NULL CHECK (role IN ('admin', 'viewer')),
  created_at TEXT NOT NULL,
  -- Absolute: CONSOLE_SESSION_TTL after sign-in, whatever the activity.
  expires_at TEXT NOT NULL,
  -- Written at most once a minute per session (not on every page view).
  last_seen  TEXT NOT NULL
) WITHOUT ROWID;

-- Expired sessions are removed at each sign-in.
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);

-- What was done through the console, by whom (role and a short tag of the session, never its id)
-- and from where. `action`: replay_event, replay_bulk, forward_replay, forward_replay_bulk,
-- forward_pause, forward_resume, sign_in, sign_out, sign_in_failed. `detail`: JSON (the filter
-- used, how many rows).
CREATE TABLE console_audit (
  id      INTEGER PRIMARY KEY,
  at      TEXT NOT NULL,
  role    TEXT CHECK (role IN ('admin', 'viewer')),
  session TEXT,
  action  TEXT NOT NULL,
  target  TEXT,
  detail  TEXT,
  ip      TEXT
);

-- The overview's deliveries per hour, by outcome: `hour` is the UTC hour of `received_at`
-- ('2026-11-21T13'). Filled by the console from the deliveries with an id above
-- console_rollup_state.last_id, so that a page view counts only what arrived since the previous
-- one (never a scan of the whole log, and no cost on the ingest path). Hours older than 8 days
-- are removed as they go.
CREATE TABLE console_delivery_hours (
  hour    TEXT    NOT NULL,
  outcome TEXT    NOT NULL,
  n       INTEGER NOT NULL,
  PRIMARY KEY (hour, outcome)
) WITHOUT ROWID;

-- How far each rollup has counted (`deliveries` for the table above).
CREATE TABLE console_rollup_state (
  name       TEXT    PRIMARY KEY,
  last_id    INTEGER NOT NULL,
  updated_at TEXT    NOT NULL
) WITHOUT ROWID;
