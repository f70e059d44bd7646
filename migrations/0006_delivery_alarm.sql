-- 0006: the deactivation alarm's run of failed answers (interface §6.1, rule 4), kept across
-- restarts so that a restart in the middle of a run does not start counting at 0 again. One row.
-- Written only when the run changes (each failure, and the 200 that ends it), never on the 200 path
-- otherwise. The time of the last delivery is not kept here: `deliveries.received_at` has it.
CREATE TABLE delivery_alarm (
  id                  INTEGER PRIMARY KEY CHECK (id = 1),
  consecutive         INTEGER NOT NULL DEFAULT 0,
  -- {"invalid_signature": 2, "storage_unavailable": 1}: the run by kind of answer.
  by_answer           TEXT    NOT NULL DEFAULT '{}',
  first_failure_at    TEXT,
  last_failure_at     TEXT,
  last_answer         TEXT,
  updated_at          TEXT    NOT NULL
);
INSERT INTO delivery_alarm (id, updated_at) VALUES (1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
