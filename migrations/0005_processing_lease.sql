-- 0005: the processing lease. Any number of processes may ingest into one database file, but one
-- at a time processes (pipeline, poller, retention): the one holding this row's lease. A holder
-- renews it well before `expires_at`; one that was SIGKILLed cannot, so a standby takes over once
-- it expires.
CREATE TABLE processing_lease (
  name        TEXT PRIMARY KEY,
  holder      TEXT NOT NULL,
  acquired_at TEXT NOT NULL,
  renewed_at  TEXT NOT NULL,
  expires_at  TEXT NOT NULL
);
