-- 0007: the hold-back window (issue 22, docs/cluster.md §10). Forward-only.
--
-- A proposal's events may be acknowledged by different replicas, whose relays reach PostgreSQL on
-- their own schedules, so `events.id` (relay commit order) is not the order the service sent them.
-- Kicks now process a key's events in `received_at` order (the acknowledging replica's clock), and
-- only those at or below the watermark: the lowest point every relay still counted has moved past
-- ("everything I acknowledged before T is in PostgreSQL"). Each relay publishes its T here, with a
-- heartbeat, on every batch and every idle turn; src/domain/watermark.ts computes the watermark and
-- says which replicas it has dropped.

-- received_at of this spool's oldest delivery not in PostgreSQL yet (the ones in flight at the
-- replica included), or the replica's clock when there is none: the replica's clock, like received_at.
ALTER TABLE relay_spools ADD COLUMN covered_through timestamptz;
-- PostgreSQL's clock at the relay's last heartbeat (a batch or an idle turn).
ALTER TABLE relay_spools ADD COLUMN heartbeat_at timestamptz;
-- PostgreSQL's clock at the first heartbeat after a silence longer than CLUSTER_HOLDBACK_MAX_MS: a
-- replica that has been live that long lets the watermark drop the silent ones.
ALTER TABLE relay_spools ADD COLUMN live_since timestamptz;
-- The replica's clock minus PostgreSQL's at its last heartbeat, in ms (midpoint of the round trip;
-- the skew between two replicas is the difference of theirs).
ALTER TABLE relay_spools ADD COLUMN clock_offset_ms double precision;
-- Spools that relayed before this migration: their last batch stands for their last heartbeat.
UPDATE relay_spools SET covered_through = coalesce(last_received_at, last_relayed_at),
  heartbeat_at = last_relayed_at, live_since = last_relayed_at;
ALTER TABLE relay_spools ALTER COLUMN covered_through SET NOT NULL;
ALTER TABLE relay_spools ALTER COLUMN heartbeat_at SET NOT NULL;
ALTER TABLE relay_spools ALTER COLUMN live_since SET NOT NULL;

-- Work keys with pending events above the watermark, and the received_at of the oldest such event:
-- the key is kicked once the watermark reaches it (a relay's idle turn or batch releases it). Written
-- by the relay (for the events it brings) and by a kick (for those it had to leave); an event is
-- either processed, or its key has a queued kick or a row here.
CREATE TABLE held_keys (
  key   text        PRIMARY KEY,
  until timestamptz NOT NULL
);
CREATE INDEX held_keys_until ON held_keys (until);
