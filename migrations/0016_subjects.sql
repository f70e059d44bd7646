-- sqlite: foreign_keys off
-- 0016: the people in the data (issue 45, LGPD; docs/privacy.md). Forward-only.
--
-- A person (the *titular*) is found by a keyed hash of their CPF, never by the CPF in clear:
-- HMAC-SHA256 under the `subject-hash` key of console_keys (src/domain/subject.ts). The hashes are
-- written by the subject index pass (src/core/subject-index.ts), which walks the rows that have none
-- yet (the partial indexes below); '' marks a row that names nobody.
ALTER TABLE proposals ADD COLUMN subject_hash TEXT;
-- When the proposal's personal fields (nu_cpf, nu_cnpj_conveniada, no_conveniada) were removed, and
-- by which erasure (NULL: by retention). A proposal so marked never gets them back from a later or
-- redelivered event (src/core/effects.ts).
ALTER TABLE proposals ADD COLUMN personal_erased_at TEXT;
ALTER TABLE proposals ADD COLUMN erasure_id TEXT;
CREATE INDEX proposals_subject ON proposals (subject_hash) WHERE subject_hash IS NOT NULL AND subject_hash <> '';
CREATE INDEX proposals_unindexed ON proposals (nu_proposta) WHERE subject_hash IS NULL;

ALTER TABLE events ADD COLUMN subject_hash TEXT;
CREATE INDEX events_subject ON events (subject_hash) WHERE subject_hash IS NOT NULL AND subject_hash <> '';
CREATE INDEX events_unindexed ON events (id) WHERE subject_hash IS NULL;

-- forward_messages gains the type `subject.erased` (an erasure told to the destinations that
-- received the person's data), which comes from no event: `event_id` may be NULL. SQLite cannot
-- alter a CHECK or NOT NULL, so the table is rebuilt (https://www.sqlite.org/lang_altertable.html,
-- "making other kinds of table schema changes"), by SQLite's own procedure: foreign keys off
-- while it runs (the marker on the first line; src/store/migrate.ts checks them all before the
-- commit), the new table copied, the old dropped, the new renamed; forward_deliveries' foreign key
-- names `forward_messages`, which the new table then is. AUTOINCREMENT's high-water mark is carried
-- over (sqlite_sequence), so no id is ever issued twice.
CREATE TABLE forward_messages_new (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  webhook_id    TEXT    NOT NULL UNIQUE,
  type          TEXT    NOT NULL CHECK (type IN ('event.received', 'proposal.changed', 'averbacao.result', 'subject.erased')),
  event_id      INTEGER,
  evento        TEXT,
  nu_proposta   INTEGER,
  request_id    TEXT,
  order_key     TEXT    NOT NULL,
  created_at    TEXT    NOT NULL,
  body          TEXT    NOT NULL,
  trace_context TEXT,
  UNIQUE (event_id, type)
);
INSERT INTO forward_messages_new (id, webhook_id, type, event_id, evento, nu_proposta, request_id, order_key,
    created_at, body, trace_context)
  SELECT id, webhook_id, type, event_id, evento, nu_proposta, request_id, order_key, created_at, body, trace_context
  FROM forward_messages;
DELETE FROM sqlite_sequence WHERE name = 'forward_messages_new';
UPDATE sqlite_sequence SET name = 'forward_messages_new' WHERE name = 'forward_messages';
DROP TABLE forward_messages;
ALTER TABLE forward_messages_new RENAME TO forward_messages;
CREATE INDEX forward_messages_nu_proposta ON forward_messages (nu_proposta, id) WHERE nu_proposta IS NOT NULL;
CREATE INDEX forward_messages_created ON forward_messages (created_at);
CREATE INDEX forward_messages_request ON forward_messages (request_id) WHERE request_id IS NOT NULL;

-- The erasure journal: one row per erasure asked for, kept for good (it holds no CPF). `summary`:
-- what each place lost (JSON). Also written, line by line, to the file `<database>.erasures`
-- beside a SQLite log, from which a restored copy re-applies the erasures it lacks.
CREATE TABLE erasures (
  id           INTEGER PRIMARY KEY,
  erasure_id   TEXT NOT NULL UNIQUE,
  subject_hash TEXT NOT NULL,
  reason       TEXT NOT NULL,
  requested_by TEXT NOT NULL,
  requested_at TEXT NOT NULL,
  completed_at TEXT,
  summary      TEXT
);
CREATE INDEX erasures_subject ON erasures (subject_hash);

-- The ledger of sharing (LGPD art. 18 VII): who was sent which message, for good (message
-- retention does not remove it) and without any CPF: a person's rows are found through their
-- proposals (nu_proposta) and registrations (request_id). Written by the triggers below, so every
-- path that sends (the sender, of either release) records it.
CREATE TABLE sharing_ledger (
  id              INTEGER PRIMARY KEY,
  recipient       TEXT NOT NULL,
  channel         TEXT NOT NULL CHECK (channel IN ('destination', 'feed')),
  webhook_id      TEXT NOT NULL,
  type            TEXT NOT NULL,
  nu_proposta     INTEGER,
  request_id      TEXT,
  first_sent_at   TEXT NOT NULL,
  acknowledged_at TEXT,
  UNIQUE (recipient, webhook_id)
);
CREATE INDEX sharing_ledger_nu ON sharing_ledger (nu_proposta) WHERE nu_proposta IS NOT NULL;
CREATE INDEX sharing_ledger_request ON sharing_ledger (request_id) WHERE request_id IS NOT NULL;

-- What was shared before this migration: every message a destination was sent at least once.
INSERT INTO sharing_ledger (recipient, channel, webhook_id, type, nu_proposta, request_id, first_sent_at, acknowledged_at)
  SELECT d.destination, 'destination', m.webhook_id, m.type, m.nu_proposta, m.request_id,
         coalesce((SELECT min(a.started_at) FROM forward_attempts a WHERE a.delivery_id = d.id), d.updated_at),
         d.delivered_at
  FROM forward_deliveries d JOIN forward_messages m ON m.id = d.message_id
  WHERE d.attempts > 0 OR d.status = 'delivered';

-- An attempt was made: the bytes left for the destination (whatever it answered).
CREATE TRIGGER sharing_on_attempt AFTER INSERT ON forward_attempts BEGIN
  INSERT INTO sharing_ledger (recipient, channel, webhook_id, type, nu_proposta, request_id, first_sent_at)
    SELECT d.destination, 'destination', m.webhook_id, m.type, m.nu_proposta, m.request_id, NEW.started_at
    FROM forward_deliveries d JOIN forward_messages m ON m.id = d.message_id
    WHERE d.id = NEW.delivery_id
  ON CONFLICT (recipient, webhook_id) DO NOTHING;
END;
CREATE TRIGGER sharing_on_delivered AFTER UPDATE OF status ON forward_deliveries
  WHEN NEW.status = 'delivered' AND OLD.status <> 'delivered' BEGIN
  UPDATE sharing_ledger SET acknowledged_at = coalesce(acknowledged_at, NEW.delivered_at)
    WHERE recipient = NEW.destination
      AND webhook_id = (SELECT webhook_id FROM forward_messages WHERE id = NEW.message_id);
END;

-- Backups `backup` made of this log, so that an erasure reaches them too.
CREATE TABLE backups (
  path       TEXT PRIMARY KEY,
  created_at TEXT NOT NULL
) WITHOUT ROWID;

