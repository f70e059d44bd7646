-- 0001: the receiver core (events and deliveries, SPEC §5).
-- Forward-only: never edit this file once released; add 0002_… instead.

-- One row per stored delivery (deduplicated on dedup_key). `body` is the raw body as received:
-- TEXT when it is valid UTF-8 (byte-exact), BLOB otherwise (only quarantined bodies).
CREATE TABLE events (
  id              INTEGER PRIMARY KEY,
  dedup_key       TEXT    NOT NULL UNIQUE,
  webhook_id      TEXT,
  kind            TEXT    NOT NULL CHECK (kind IN ('event', 'registry', 'poll')),
  evento          TEXT,
  nu_proposta     INTEGER,
  request_id      TEXT,
  registry_status TEXT,
  tentativa       INTEGER,
  received_at     TEXT    NOT NULL,
  body            BLOB,
  body_bytes      INTEGER NOT NULL DEFAULT 0,
  status          TEXT    NOT NULL CHECK (status IN ('pending', 'done', 'failed', 'dead', 'ignored', 'invalid')),
  attempts        INTEGER NOT NULL DEFAULT 0,
  next_attempt_at TEXT,
  last_error      TEXT,
  processed_at    TEXT,
  duplicates      INTEGER NOT NULL DEFAULT 0,
  last_duplicate_at TEXT
);

-- Few indexes: each one costs every ingest. (status, id) serves the pipeline's work list (pending,
-- failed, oldest first), the status filters and the counts.
CREATE INDEX events_status_id ON events (status, id);
CREATE INDEX events_nu_proposta ON events (nu_proposta, id) WHERE nu_proposta IS NOT NULL;
CREATE INDEX events_request_id ON events (request_id, id) WHERE request_id IS NOT NULL;

-- One row per HTTP request to a webhook route, whatever its outcome; never the body.
CREATE TABLE deliveries (
  id           INTEGER PRIMARY KEY,
  received_at  TEXT    NOT NULL,
  path         TEXT    NOT NULL,
  outcome      TEXT    NOT NULL CHECK (outcome IN ('accepted', 'duplicate', 'quarantined', 'invalid_signature',
                                                    'payload_too_large', 'storage_unavailable', 'aborted', 'forbidden')),
  http_status  INTEGER NOT NULL,
  dedup_key    TEXT,
  event_id     INTEGER,
  duration_ms  REAL    NOT NULL,
  body_bytes   INTEGER,
  secret_index INTEGER,
  remote_addr  TEXT,
  detail       TEXT
);

CREATE INDEX deliveries_outcome_id ON deliveries (outcome, id);
CREATE INDEX deliveries_received_at ON deliveries (received_at);

-- Written by /readyz to prove the database takes writes.
CREATE TABLE health_probe (
  id         INTEGER PRIMARY KEY CHECK (id = 1),
  checked_at TEXT NOT NULL
);
INSERT INTO health_probe (id, checked_at) VALUES (1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
