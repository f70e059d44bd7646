-- compat: breaking
-- 0012: the people in the data (issue 45): SQLite's migrations/0016_subjects.sql (see its notes) in
-- PostgreSQL's types. Breaking: the previous release could run on its tables (it never reads the
-- new ones, and the triggers record its sends in the ledger), but a replica of it processing a late
-- event of an erased proposal would write the CPF back (its MOVE knows no personal_erased_at), and
-- its feed and sender would meet subject.erased rows without an event. So it stops at this schema
-- (issue 46: it refuses, out of rotation) until replaced. The statements that lock a live table do so for a moment (ADD COLUMN
-- without a default, DROP NOT NULL, a CHECK added NOT VALID) and give up after 5 s rather than queue
-- ingest behind them. The partial indexes on events and proposals are built in the transaction
-- (the migration runner has no step outside one yet, issue 46): on a log of a million events the
-- build holds back relay inserts for about a second.
SET LOCAL lock_timeout = '5s';

ALTER TABLE proposals ADD COLUMN subject_hash text;
ALTER TABLE proposals ADD COLUMN personal_erased_at timestamptz;
ALTER TABLE proposals ADD COLUMN erasure_id text;
CREATE INDEX proposals_subject ON proposals (subject_hash) WHERE subject_hash IS NOT NULL AND subject_hash <> '';
CREATE INDEX proposals_unindexed ON proposals (nu_proposta) WHERE subject_hash IS NULL;

ALTER TABLE events ADD COLUMN subject_hash text;
CREATE INDEX events_subject ON events (subject_hash) WHERE subject_hash IS NOT NULL AND subject_hash <> '';
CREATE INDEX events_unindexed ON events (id) WHERE subject_hash IS NULL;

ALTER TABLE forward_messages ALTER COLUMN event_id DROP NOT NULL;
ALTER TABLE forward_messages DROP CONSTRAINT forward_messages_type_check;
ALTER TABLE forward_messages ADD CONSTRAINT forward_messages_type_check
  CHECK (type IN ('event.received', 'proposal.changed', 'averbacao.result', 'subject.erased')) NOT VALID;
CREATE INDEX forward_messages_request ON forward_messages (request_id) WHERE request_id IS NOT NULL;

CREATE TABLE erasures (
  id           bigserial   PRIMARY KEY,
  erasure_id   text        NOT NULL UNIQUE,
  subject_hash text        NOT NULL,
  reason       text        NOT NULL,
  requested_by text        NOT NULL,
  requested_at timestamptz NOT NULL,
  completed_at timestamptz,
  summary      text
);
CREATE INDEX erasures_subject ON erasures (subject_hash);

CREATE TABLE sharing_ledger (
  id              bigserial   PRIMARY KEY,
  recipient       text        NOT NULL,
  channel         text        NOT NULL CHECK (channel IN ('destination', 'feed')),
  webhook_id      text        NOT NULL,
  type            text        NOT NULL,
  nu_proposta     text, -- text, as forward_messages.nu_proposta (0001's note)
  request_id      text,
  first_sent_at   timestamptz NOT NULL,
  acknowledged_at timestamptz,
  UNIQUE (recipient, webhook_id)
);
CREATE INDEX sharing_ledger_nu ON sharing_ledger (nu_proposta) WHERE nu_proposta IS NOT NULL;
CREATE INDEX sharing_ledger_request ON sharing_ledger (request_id) WHERE request_id IS NOT NULL;

INSERT INTO sharing_ledger (recipient, channel, webhook_id, type, nu_proposta, request_id, first_sent_at, acknowledged_at)
  SELECT d.destination, 'destination', m.webhook_id, m.type, m.nu_proposta, m.request_id,
         coalesce((SELECT min(a.started_at) FROM forward_attempts a WHERE a.delivery_id = d.id), d.updated_at),
         d.delivered_at
  FROM forward_deliveries d JOIN forward_messages m ON m.id = d.message_id
  WHERE d.attempts > 0 OR d.status = 'delivered';

CREATE FUNCTION consig_sharing_on_attempt() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO sharing_ledger (recipient, channel, webhook_id, type, nu_proposta, request_id, first_sent_at)
    SELECT d.destination, 'destination', m.webhook_id, m.type, m.nu_proposta, m.request_id, NEW.started_at
    FROM forward_deliveries d JOIN forward_messages m ON m.id = d.message_id
    WHERE d.id = NEW.delivery_id
  ON CONFLICT (recipient, webhook_id) DO NOTHING;
  RETURN NULL;
END $$;
CREATE TRIGGER sharing_on_attempt AFTER INSERT ON forward_attempts
  FOR EACH ROW EXECUTE FUNCTION consig_sharing_on_attempt();

CREATE FUNCTION consig_sharing_on_delivered() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sharing_ledger SET acknowledged_at = coalesce(acknowledged_at, NEW.delivered_at)
    WHERE recipient = NEW.destination
      AND webhook_id = (SELECT webhook_id FROM forward_messages WHERE id = NEW.message_id);
  RETURN NULL;
END $$;
CREATE TRIGGER sharing_on_delivered AFTER UPDATE OF status ON forward_deliveries
  FOR EACH ROW WHEN (NEW.status = 'delivered' AND OLD.status IS DISTINCT FROM 'delivered')
  EXECUTE FUNCTION consig_sharing_on_delivered();

-- Backups `backup` made (SQLite's; none here, where backups are the database operator's): the
-- table exists so that the one query that lists them runs on both stores.
CREATE TABLE backups (
  path       text        PRIMARY KEY,
  created_at timestamptz NOT NULL
);
