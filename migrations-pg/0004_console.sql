-- 0004: the operator console in cluster mode (contract §9, §10). Forward-only. The tables of
-- SQLite's migrations/0008_console.sql with the same names, columns and meanings, in PostgreSQL's
-- types (see 0001's note), shared by every replica: behind a load balancer a browser signed in on
-- one replica sends its next request to another, and an action done anywhere is in one audit table.

-- One row per signed-in browser. The session id itself (32 random bytes) lives only in the
-- `consig_console` cookie; the table keeps its SHA-256, so a copy of the database signs no one in.
CREATE TABLE console_sessions (
  id_hash    text        PRIMARY KEY,
  role       text        NOT NULL CHECK (role IN ('admin', 'viewer')),
  created_at timestamptz NOT NULL,
  -- Absolute: CONSOLE_SESSION_TTL after sign-in, whatever the activity.
  expires_at timestamptz NOT NULL,
  -- Written at most once a minute per session (not on every page view).
  last_seen  timestamptz NOT NULL
);

-- Expired sessions are removed at each sign-in.
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);

-- What was done through the console, by whom (role and a short tag of the session, never its id)
-- and from where. `action`: replay_event, replay_bulk, forward_replay, forward_replay_bulk,
-- forward_pause, forward_resume, sign_in, sign_out, sign_in_failed. `detail`: JSON text (the
-- filter used, how many rows), any CPF in it masked.
CREATE TABLE console_audit (
  id      bigserial   PRIMARY KEY,
  at      timestamptz NOT NULL,
  role    text        CHECK (role IN ('admin', 'viewer')),
  session text,
  action  text        NOT NULL,
  target  text,
  detail  text,
  ip      text
);

-- The overview's deliveries per hour, by outcome: `hour` is the UTC hour of `received_at`
-- ('2026-11-21T13', text as in SQLite). Filled by the console from the deliveries with an id above
-- console_rollup_state.last_id: `deliveries.id` follows commit order (the relay's advisory lock,
-- src/cluster/relay.ts), so no row commits below the watermark after it moved. The replicas
-- rendering the overview at once take turns on an advisory lock (src/cluster/pg-console-rollup.ts):
-- none counts a row twice. Hours older than 8 days are removed as they go.
CREATE TABLE console_delivery_hours (
  hour    text   NOT NULL,
  outcome text   NOT NULL,
  n       bigint NOT NULL,
  PRIMARY KEY (hour, outcome)
);

-- How far each rollup has counted (`deliveries` for the table above).
CREATE TABLE console_rollup_state (
  name       text        PRIMARY KEY,
  last_id    bigint      NOT NULL,
  updated_at timestamptz NOT NULL
);

-- Cluster only: the order averbações were tracked in, the console's keyset (SQLite pages on the
-- table's rowid, which PostgreSQL has no equivalent of). Existing rows are numbered as they lie.
ALTER TABLE averbacoes ADD COLUMN seq bigserial;
CREATE UNIQUE INDEX averbacoes_seq ON averbacoes (seq);

-- The console's time filter on events (`from`, `to`). SQLite finds the id range by a binary search
-- on the primary key because its ids follow received_at; here ids follow the relay's commits, which
-- interleave the replicas' spools, so received_at needs an index of its own.
CREATE INDEX events_received_at ON events (received_at);

-- The console's partial-JSON match on a body (bytea, as received): its JSON, or null when the bytes
-- are not UTF-8 JSON (a quarantined delivery), as SQLite's json_valid() leaves such a body out
-- rather than failing the query.
CREATE FUNCTION console_body_json(body bytea) RETURNS jsonb
  LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
  RETURN convert_from(body, 'UTF8')::jsonb;
EXCEPTION WHEN others THEN
  RETURN NULL;
END $$;
