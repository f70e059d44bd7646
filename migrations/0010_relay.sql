-- 0010: cluster mode's relay (contract §10). Forward-only.
--
-- In cluster mode this file is the replica's spool: deliveries are acknowledged from it as always,
-- and a relay copies them to PostgreSQL. One row: the spool's identity (random, made once, so a
-- replaced volume is a new spool and never mistaken for the old one) and how far the relay got
-- (`deliveries.id`). Unused, and harmless, without DATABASE_URL.
CREATE TABLE relay_cursor (
  id              INTEGER PRIMARY KEY CHECK (id = 1),
  spool           TEXT    NOT NULL,
  relayed_through INTEGER NOT NULL DEFAULT 0,
  relayed_at      TEXT
);
INSERT INTO relay_cursor (id, spool) VALUES (1, lower(hex(randomblob(16))));
