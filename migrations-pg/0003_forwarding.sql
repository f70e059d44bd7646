-- 0003: forwarding to the lender's own systems and the change feed, in cluster mode (contract §8,
-- issue 13). Forward-only. The tables of SQLite's migrations/0007_forwarding.sql with the same
-- names, columns and meanings, in PostgreSQL's types (see 0001's note).
--
-- The outbox is written by the kick that processes the event, in its transaction, so a crash can
-- neither lose a message nor create it twice (UNIQUE (event_id, type): an event processed again
-- adds nothing). Commit order of forward_messages.id, which the feed's cursor relies on, comes from
-- an advisory lock the kick takes before inserting its messages and holds until its commit
-- (src/cluster/pg-outbox.ts): without it, two kicks could commit ids 11 and 10 in that order and a
-- feed reader past 11 would never see 10.

CREATE TABLE forward_messages (
  -- Commit order (see above): the change feed's cursor.
  id          bigserial   PRIMARY KEY,
  -- `webhook-id` of every attempt of this message, at every destination (`msg_…`, random).
  webhook_id  text        NOT NULL UNIQUE,
  type        text        NOT NULL CHECK (type IN ('event.received', 'proposal.changed', 'averbacao.result')),
  event_id    bigint      NOT NULL REFERENCES events (id),
  evento      text,
  -- text, as events.nu_proposta (0001's note).
  nu_proposta text,
  request_id  text,
  -- Messages with the same key reach a destination in id order (p:<nu_proposta>, r:<requestId>, e:<event id>).
  order_key   text        NOT NULL,
  created_at  timestamptz NOT NULL,
  -- The JSON body, with the CPF in full; masked when sent to a destination that did not ask for it.
  body        text        NOT NULL,
  UNIQUE (event_id, type)
);

CREATE INDEX forward_messages_nu_proposta ON forward_messages (nu_proposta, id) WHERE nu_proposta IS NOT NULL;
CREATE INDEX forward_messages_created ON forward_messages (created_at);

CREATE TABLE forward_deliveries (
  id              bigserial   PRIMARY KEY,
  message_id      bigint      NOT NULL REFERENCES forward_messages (id),
  destination     text        NOT NULL,
  order_key       text        NOT NULL,
  -- pending: waiting for its first or next attempt; delivered: a 2xx; dead: a permanent answer or
  -- out of attempts (replayable).
  status          text        NOT NULL CHECK (status IN ('pending', 'delivered', 'dead')),
  attempts        integer     NOT NULL DEFAULT 0,
  -- When the next attempt may go (pending only).
  next_attempt_at timestamptz,
  last_status     integer,
  last_error      text,
  created_at      timestamptz NOT NULL,
  updated_at      timestamptz NOT NULL,
  delivered_at    timestamptz,
  UNIQUE (message_id, destination)
);

-- The sender's work list, and the head of each (destination, order_key) line.
CREATE INDEX forward_deliveries_pending ON forward_deliveries (destination, id) WHERE status = 'pending';
CREATE INDEX forward_deliveries_line ON forward_deliveries (destination, order_key, id) WHERE status = 'pending';
-- Listings by destination and status (dead letters), newest first.
CREATE INDEX forward_deliveries_status ON forward_deliveries (destination, status, id);

-- Every attempt: what was answered, how long it took.
CREATE TABLE forward_attempts (
  id          bigserial        PRIMARY KEY,
  delivery_id bigint           NOT NULL REFERENCES forward_deliveries (id),
  attempt     integer          NOT NULL,
  started_at  timestamptz      NOT NULL,
  duration_ms double precision NOT NULL,
  http_status integer,
  -- timeout / network: and what happened; null when the destination answered.
  error       text,
  outcome     text             NOT NULL CHECK (outcome IN ('delivered', 'permanent', 'temporary')),
  -- The first KB of the answer's body.
  answer      text
);

CREATE INDEX forward_attempts_delivery ON forward_attempts (delivery_id, id);

-- What an operator changed about a destination (pause) and its circuit breaker, shared by the
-- replicas: the one sending a destination reads the pause flag and keeps the circuit here.
CREATE TABLE forward_destinations (
  name       text        PRIMARY KEY,
  -- SQLite's 0/1.
  paused     boolean     NOT NULL DEFAULT false,
  -- The circuit breaker's state as JSON (domain/forwarding/circuit.ts); null is closed.
  circuit    text,
  updated_at timestamptz NOT NULL
);
