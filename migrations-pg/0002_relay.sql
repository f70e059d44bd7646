-- 0002: the relay's bookkeeping (issue 13). Forward-only.
--
-- A relayed delivery was identified by (replica, spool_id). A replica whose volume is replaced
-- starts a new spool whose ids begin at 1 again under the same REPLICA_ID, and those rows would
-- have been taken for ones already relayed and silently dropped. Each spool therefore has its own
-- random id (written in it when it is created, migrations/0010_relay.sql), and that is the key.
ALTER TABLE deliveries ADD COLUMN spool text NOT NULL DEFAULT '';
ALTER TABLE deliveries DROP CONSTRAINT deliveries_replica_spool_id_key;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_spool_spool_id UNIQUE (spool, spool_id);

-- One row per spool that ever relayed: how far it got and when (relay lag per replica, for the
-- console and `stats`; the live figures are each replica's metrics).
CREATE TABLE relay_spools (
  spool           text        PRIMARY KEY,
  -- REPLICA_ID of the replica that owns the spool.
  replica         text        NOT NULL,
  -- The spool's last relayed `deliveries.id`.
  relayed_through bigint      NOT NULL,
  -- When the first and the latest batches committed here.
  first_relayed_at timestamptz NOT NULL DEFAULT now(),
  last_relayed_at timestamptz NOT NULL DEFAULT now(),
  -- received_at of the newest delivery relayed: last_relayed_at minus this is the latest lag.
  last_received_at timestamptz
);
