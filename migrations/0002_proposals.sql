-- 0002: the proposal life cycle (SPEC §5, §6). Forward-only.

-- One row per proposal: where it stands. WITHOUT ROWID so that nu_proposta keeps INTEGER affinity
-- without becoming the rowid (a non-numeric value from the service is kept as text, not refused).
CREATE TABLE proposals (
  nu_proposta        INTEGER NOT NULL,
  uuid               TEXT,
  nu_cpf             TEXT,
  nu_cnpj_conveniada TEXT,
  vl_emprestimo      REAL,
  no_conveniada      TEXT,
  stage              TEXT    NOT NULL,
  status             TEXT    NOT NULL,
  last_evento        TEXT,
  first_event_id     INTEGER,
  last_event_id      INTEGER,
  created_at         TEXT    NOT NULL,
  updated_at         TEXT    NOT NULL,
  PRIMARY KEY (nu_proposta)
) WITHOUT ROWID;

CREATE INDEX proposals_status ON proposals (status);

-- Every life-cycle event a proposal received, applied or not. UNIQUE(event_id): an event's effect
-- is recorded once, even if it is processed again after a crash or a replay.
CREATE TABLE proposal_transitions (
  id          INTEGER PRIMARY KEY,
  nu_proposta INTEGER NOT NULL,
  event_id    INTEGER NOT NULL UNIQUE,
  evento      TEXT    NOT NULL,
  from_status TEXT,
  to_status   TEXT    NOT NULL,
  applied     INTEGER NOT NULL CHECK (applied IN (0, 1)),
  reason      TEXT    NOT NULL,
  at          TEXT    NOT NULL
);

CREATE INDEX proposal_transitions_nu ON proposal_transitions (nu_proposta, id);

-- Due retries (status failed) and replays (pending with next_attempt_at set) are found by time.
CREATE INDEX events_due ON events (next_attempt_at) WHERE next_attempt_at IS NOT NULL AND status IN ('pending', 'failed');
