-- 0003: averbação (payroll registration) tracking and the registry poller (SPEC §5, seed §3.2, §4.2–4.4).

CREATE TABLE averbacoes (
  request_id        TEXT    PRIMARY KEY,
  correlation_id    TEXT,
  nu_proposta       INTEGER,
  status            TEXT    NOT NULL CHECK (status IN ('queued', 'processing', 'completed', 'error')),
  -- Which of the two ways brought the final result first (the other is then a no-op).
  result_source     TEXT    CHECK (result_source IN ('webhook', 'poll')),
  -- How it entered tracking: started here, declared by an operator, or seen in an event.
  tracked_via       TEXT    NOT NULL CHECK (tracked_via IN ('started', 'declared', 'event', 'registry')),
  poll_attempts     INTEGER NOT NULL DEFAULT 0,
  -- NULL once final or stale: the poller's due list is this column's index, so waiting rows cost nothing.
  next_poll_at      TEXT,
  last_poll_at      TEXT,
  last_poll_outcome TEXT,
  stale             INTEGER NOT NULL DEFAULT 0 CHECK (stale IN (0, 1)),
  -- The whole body of the final answer (the error details are "not shown" in the seed, §2.3).
  result_body       TEXT,
  result_event_id   INTEGER,
  created_at        TEXT    NOT NULL,
  updated_at        TEXT    NOT NULL,
  completed_at      TEXT
);

CREATE INDEX averbacoes_due ON averbacoes (next_poll_at) WHERE next_poll_at IS NOT NULL;
CREATE INDEX averbacoes_nu_proposta ON averbacoes (nu_proposta) WHERE nu_proposta IS NOT NULL;
CREATE INDEX averbacoes_status ON averbacoes (status, stale);
