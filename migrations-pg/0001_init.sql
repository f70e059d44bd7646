-- 0001: the cluster schema on PostgreSQL (contract §10, issue 13). Forward-only: never edit this
-- file once released (the runner refuses a database whose recorded checksum differs); add 0002_…
-- instead. Each file runs in one transaction, so nothing here may need to run outside one
-- (no CREATE INDEX CONCURRENTLY, no ALTER TYPE … ADD VALUE).
--
-- The tables of the SQLite log (contract §5: migrations/0001–0009) with the same names, columns and
-- meanings, in PostgreSQL's own types: timestamptz for the ISO-8601 text timestamps, boolean for
-- the 0/1 flags, bigint for ids, bytea for the raw body. A column SQLite has, this has too (a test
-- compares the two schemas); the columns only the cluster needs (which replica, when relayed) are
-- marked "cluster only".
--
-- nu_proposta is text, not bigint: the interface does not say it is always an integer, and the
-- receiver keeps a non-numeric one as text rather than losing it (docs/service-interface.md §2;
-- SQLite's INTEGER affinity does that by itself). A bigint column would make such a delivery
-- impossible to relay. Numeric values are written in their canonical decimal form ('123', never
-- '0123'), as src/domain/normalize.ts produces them, so equality and uniqueness hold.

-- One row per distinct delivery, deduplicated on dedup_key across all replicas: a delivery that two
-- replicas acknowledged is one event whose `duplicates` counts the other copies.
CREATE TABLE events (
  -- Commit order of arrival in PostgreSQL (not of acknowledgement at a replica: see received_at).
  id                bigserial   PRIMARY KEY,
  -- metadata.webhook_id; for a registry result without one registry:<requestId>:<status>; else
  -- sha256:<hex of the raw body> (contract §4).
  dedup_key         text        NOT NULL UNIQUE,
  -- metadata.webhook_id as sent, when there was one.
  webhook_id        text,
  -- event: a §6 delivery (`evento`); registry: a registry result (§4.4); poll: a result read by polling.
  kind              text        NOT NULL CHECK (kind IN ('event', 'registry', 'poll')),
  -- The event name as the service spells it (`averbacao.aprovada`); null for registry results.
  evento            text,
  -- dados.nu_proposta (text: see the note at the top).
  nu_proposta       text,
  -- The averbação requestId the delivery names, if any.
  request_id        text,
  -- The registry status a registry result or poll reported (queued, processing, completed, error).
  registry_status   text,
  -- metadata.tentativa: the service's attempt number for this delivery.
  tentativa         integer,
  -- When the first replica acknowledged it (its spool's clock), not when it reached PostgreSQL.
  received_at       timestamptz NOT NULL,
  -- The raw body, byte for byte as received (bytea: text would refuse invalid UTF-8 and NUL, which
  -- quarantined bodies may hold). Read it with convert_from(body, 'UTF8'). Null once pruned.
  body              bytea,
  -- Length of the raw body in bytes (kept after the body is pruned).
  body_bytes        integer     NOT NULL DEFAULT 0,
  -- When retention removed the body (the row and its dedup key stay, so a late copy is still a duplicate).
  body_pruned_at    timestamptz,
  -- Processing state: pending (waiting), done, failed (will be retried), dead (out of attempts,
  -- replayable), ignored (unknown `evento`, §9 of the interface), invalid (quarantined).
  status            text        NOT NULL CHECK (status IN ('pending', 'done', 'failed', 'dead', 'ignored', 'invalid')),
  -- Handler runs so far.
  attempts          integer     NOT NULL DEFAULT 0,
  -- When a failed (or replayed) event may run again; null otherwise.
  next_attempt_at   timestamptz,
  -- The last handler error; for `invalid`, why it was quarantined.
  last_error        text,
  -- When it reached a final status (done, dead, ignored, invalid).
  processed_at      timestamptz,
  -- Further copies of this delivery seen by any replica.
  duplicates        integer     NOT NULL DEFAULT 0,
  -- When the latest of those copies was acknowledged.
  last_duplicate_at timestamptz,
  -- Cluster only: the replica whose copy was relayed first (REPLICA_ID); null for rows written in
  -- PostgreSQL itself (poll results).
  first_replica     text,
  -- Cluster only: when the first copy reached PostgreSQL (relay lag = relayed_at - received_at).
  relayed_at        timestamptz NOT NULL DEFAULT now()
);

-- As in SQLite: each index costs every relayed batch, so only those the readers need.
-- (status, id): work lists, status filters and counts.
CREATE INDEX events_status_id ON events (status, id);
CREATE INDEX events_nu_proposta ON events (nu_proposta, id) WHERE nu_proposta IS NOT NULL;
CREATE INDEX events_request_id ON events (request_id, id) WHERE request_id IS NOT NULL;
-- Due retries (failed) and replays (pending with next_attempt_at set), found by time.
CREATE INDEX events_due ON events (next_attempt_at)
  WHERE next_attempt_at IS NOT NULL AND status IN ('pending', 'failed');

-- One row per HTTP request to a webhook route at any replica, whatever its outcome; never the body.
-- Written in each replica's SQLite spool at the request and relayed here.
CREATE TABLE deliveries (
  id           bigserial        PRIMARY KEY,
  -- Cluster only: the replica that answered the request (REPLICA_ID).
  replica      text             NOT NULL,
  -- Cluster only: the row's id in that replica's spool (its SQLite `deliveries.id`). With replica it
  -- is unique, so a relay batch sent again after a lost commit acknowledgement inserts nothing twice.
  spool_id     bigint           NOT NULL,
  -- When the request arrived at the replica.
  received_at  timestamptz      NOT NULL,
  -- The route: /webhooks or /webhooks/registry.
  path         text             NOT NULL,
  -- What the replica answered (contract §4's response table; aborted: the body stopped before its
  -- end, answered 400; forbidden: the address is not in ALLOWED_CIDRS, answered 403).
  outcome      text             NOT NULL CHECK (outcome IN ('accepted', 'duplicate', 'quarantined', 'invalid_signature',
                                                           'payload_too_large', 'storage_unavailable', 'aborted', 'forbidden')),
  -- The HTTP status answered.
  http_status  integer          NOT NULL,
  -- The delivery's dedup key, when the body was read far enough to compute it.
  dedup_key    text,
  -- The event this request stored or was a duplicate of (events.id in PostgreSQL, set by the relay).
  event_id     bigint           REFERENCES events (id),
  -- Request start to commit in the spool: what the service waited for.
  duration_ms  double precision NOT NULL,
  -- Size of the body as received, when read.
  body_bytes   integer,
  -- Which of WEBHOOK_SECRETS matched (0-based), for secret rotation.
  secret_index integer,
  -- The client's address (X-Forwarded-For read through TRUST_PROXY hops).
  remote_addr  text,
  -- Why, in a few words, for a refusal or a storage error.
  detail       text,
  -- Cluster only: when the relay wrote the row here.
  relayed_at   timestamptz      NOT NULL DEFAULT now(),
  UNIQUE (replica, spool_id)
);

CREATE INDEX deliveries_outcome_id ON deliveries (outcome, id);
CREATE INDEX deliveries_received_at ON deliveries (received_at);
CREATE INDEX deliveries_event_id ON deliveries (event_id) WHERE event_id IS NOT NULL;

-- One row per proposal: where it stands in the life cycle (contract §6).
CREATE TABLE proposals (
  -- The service's proposal number (text: see the note at the top).
  nu_proposta        text        PRIMARY KEY,
  -- The service's uuid of the proposal.
  uuid               text,
  -- The borrower's CPF, 11 digits (personal data, LGPD: never logged in full).
  nu_cpf             text,
  -- The employer's CNPJ, 14 digits.
  nu_cnpj_conveniada text,
  -- The loan amount in reais. numeric, exact (SQLite keeps a REAL); node-postgres returns it as a
  -- string, which keeps it exact too.
  vl_emprestimo      numeric,
  -- The employer's name.
  no_conveniada      text,
  -- Proposta, Averbação, Formalização, Efetivação or Pagamento.
  stage              text        NOT NULL,
  -- The life-cycle status (em_analise … paga), src/domain/lifecycle.ts.
  status             text        NOT NULL,
  -- The last event that moved it.
  last_evento        text,
  -- The event that created the row, and the last one that moved it.
  first_event_id     bigint      REFERENCES events (id),
  last_event_id      bigint      REFERENCES events (id),
  created_at         timestamptz NOT NULL,
  updated_at         timestamptz NOT NULL
);

-- Per-status counts, and stuck proposals (status, updated_at < limit) read as an index range.
-- SQLite also keeps (status) alone; here this index serves those queries as well.
CREATE INDEX proposals_status_updated ON proposals (status, updated_at);

-- Every life-cycle event a proposal received, applied or not. UNIQUE (event_id): an event's effect
-- is recorded once, even when a job runs again after a crash or a replay.
CREATE TABLE proposal_transitions (
  id          bigserial   PRIMARY KEY,
  nu_proposta text        NOT NULL REFERENCES proposals (nu_proposta),
  event_id    bigint      NOT NULL UNIQUE REFERENCES events (id),
  evento      text        NOT NULL,
  -- The status before the event; null when the proposal had not been seen.
  from_status text,
  -- The status the event sets; the proposal is at it only when applied.
  to_status   text        NOT NULL,
  -- false when an out-of-order, repeated or post-final event was recorded but did not move the
  -- proposal (SQLite's 0/1).
  applied     boolean     NOT NULL,
  -- Why (src/domain/lifecycle.ts TransitionReason): created, forward, final, payment_retried,
  -- same_status, late, after_final.
  reason      text        NOT NULL,
  -- When the transition was recorded.
  at          timestamptz NOT NULL
);

CREATE INDEX proposal_transitions_nu ON proposal_transitions (nu_proposta, id);

-- Averbação (payroll registration) tracking and the registry poll (interface §3.2, §4.2–4.4).
CREATE TABLE averbacoes (
  -- The requestId the service returned for the registration.
  request_id        text        PRIMARY KEY,
  -- The correlation id sent with the request, if any.
  correlation_id    text,
  -- The proposal it belongs to, when known (no foreign key: a registration may be tracked before
  -- its proposal is seen).
  nu_proposta       text,
  -- The registry's status.
  status            text        NOT NULL CHECK (status IN ('queued', 'processing', 'completed', 'error')),
  -- Which of the two ways brought the final result first (the other is then a no-op).
  result_source     text        CHECK (result_source IN ('webhook', 'poll')),
  -- How it entered tracking: started here, declared by an operator, seen in an event, or in a
  -- registry result.
  tracked_via       text        NOT NULL CHECK (tracked_via IN ('started', 'declared', 'event', 'registry')),
  -- Polls made so far.
  poll_attempts     integer     NOT NULL DEFAULT 0,
  -- When the next poll is due; null once final or stale.
  next_poll_at      timestamptz,
  last_poll_at      timestamptz,
  -- What the last poll got (a status, or the error).
  last_poll_outcome text,
  -- true once REGISTRY_POLL_MAX_AGE_MS passed without a final status; polling stopped.
  stale             boolean     NOT NULL DEFAULT false,
  -- The whole body of the final answer, as received (the seed does not show the error details, §2.3).
  result_body       text,
  -- The event (webhook or poll result) that brought the final status.
  result_event_id   bigint      REFERENCES events (id),
  created_at        timestamptz NOT NULL,
  updated_at        timestamptz NOT NULL,
  -- When it reached completed or error.
  completed_at      timestamptz
);

CREATE INDEX averbacoes_due ON averbacoes (next_poll_at) WHERE next_poll_at IS NOT NULL;
CREATE INDEX averbacoes_nu_proposta ON averbacoes (nu_proposta) WHERE nu_proposta IS NOT NULL;
CREATE INDEX averbacoes_status ON averbacoes (status, stale);
