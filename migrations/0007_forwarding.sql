-- 0007: forwarding to the lender's own systems (contract §8). Forward-only.
--
-- The outbox. A message is written by the pipeline in the same transaction that processes the
-- event causing it, so a crash can neither lose it nor create it twice (UNIQUE (event_id, type)
-- makes a replayed event a no-op). One delivery row per message and destination that wants it.

CREATE TABLE forward_messages (
  -- Commit order: the change feed's cursor. AUTOINCREMENT: an id is never used again, even after
  -- retention removed the newest message, so a cursor never skips a later one.
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  -- `webhook-id` of every attempt of this message, at every destination (`msg_…`, random).
  webhook_id  TEXT    NOT NULL UNIQUE,
  type        TEXT    NOT NULL CHECK (type IN ('event.received', 'proposal.changed', 'averbacao.result')),
  event_id    INTEGER NOT NULL,
  evento      TEXT,
  nu_proposta INTEGER,
  request_id  TEXT,
  -- Messages with the same key reach a destination in id order (p:<nu_proposta>, r:<requestId>, e:<event id>).
  order_key   TEXT    NOT NULL,
  created_at  TEXT    NOT NULL,
  -- The JSON body, with the CPF in full; masked when sent to a destination that did not ask for it.
  body        TEXT    NOT NULL,
  UNIQUE (event_id, type)
);

CREATE INDEX forward_messages_nu_proposta ON forward_messages (nu_proposta, id) WHERE nu_proposta IS NOT NULL;
CREATE INDEX forward_messages_created ON forward_messages (created_at);

CREATE TABLE forward_deliveries (
  id              INTEGER PRIMARY KEY,
  message_id      INTEGER NOT NULL REFERENCES forward_messages (id),
  destination     TEXT    NOT NULL,
  order_key       TEXT    NOT NULL,
  -- pending: waiting for its first or next attempt; delivered: a 2xx; dead: a permanent answer or
  -- out of attempts (replayable).
  status          TEXT    NOT NULL CHECK (status IN ('pending', 'delivered', 'dead')),
  attempts        INTEGER NOT NULL DEFAULT 0,
  -- When the next attempt may go (pending only).
  next_attempt_at TEXT,
  last_status     INTEGER,
  last_error      TEXT,
  created_at      TEXT    NOT NULL,
  updated_at      TEXT    NOT NULL,
  delivered_at    TEXT,
  UNIQUE (message_id, destination)
);

-- The sender's work list, and the head of each (destination, order_key) line.
CREATE INDEX forward_deliveries_pending ON forward_deliveries (destination, id) WHERE status = 'pending';
CREATE INDEX forward_deliveries_line ON forward_deliveries (destination, order_key, id) WHERE status = 'pending';
-- Listings by destination and status (dead letters), newest first.
CREATE INDEX forward_deliveries_status ON forward_deliveries (destination, status, id);

-- Every attempt: what was answered, how long it took.
CREATE TABLE forward_attempts (
  id          INTEGER PRIMARY KEY,
  delivery_id INTEGER NOT NULL REFERENCES forward_deliveries (id),
  attempt     INTEGER NOT NULL,
  started_at  TEXT    NOT NULL,
  duration_ms REAL    NOT NULL,
  http_status INTEGER,
  -- timeout / network: and what happened; null when the destination answered.
  error       TEXT,
  outcome     TEXT    NOT NULL CHECK (outcome IN ('delivered', 'permanent', 'temporary')),
  -- The first KB of the answer's body.
  answer      TEXT
);

CREATE INDEX forward_attempts_delivery ON forward_attempts (delivery_id, id);

-- What an operator changed about a destination (pause) and its circuit breaker, across restarts.
CREATE TABLE forward_destinations (
  name       TEXT    PRIMARY KEY,
  paused     INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
  -- The circuit breaker's state as JSON (domain/forwarding/circuit.ts); null is closed.
  circuit    TEXT,
  updated_at TEXT    NOT NULL
);
