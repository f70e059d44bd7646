-- 0007: ids a failover never issues twice (issue 32, docs/cluster.md §6.1). Forward-only.
--
-- A standby promoted while it lagged (asynchronous replication) continues each sequence from
-- where its copy stood, below ids the old primary had already issued: an `event_id` a lender was
-- sent, or a change-feed cursor a reader holds, would name another row. Sequences are WAL-logged 32
-- values ahead, not enough for seconds of lag.
--
-- Each id that leaves the database is therefore taken above the current timeline's base: PostgreSQL
-- starts a new timeline at every promotion (the first 8 hex digits of the current WAL file's name),
-- and timeline t's ids start above (t - 1) × 2^36. A database on its first timeline keeps its ids as
-- they are; the first id taken after a promotion jumps to the new base, above every id the old
-- timeline could have issued (2^36, 68.7 billion, per timeline; 2^17 timelines before 2^53, the
-- largest integer JavaScript holds exactly).

-- The timeline this primary writes on.
CREATE FUNCTION consig_timeline() RETURNS bigint LANGUAGE sql VOLATILE AS $$
  SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
$$;

-- The next value of `seq`, at or above the current timeline's base. The jump is made once per
-- timeline and sequence, under a transaction lock, so two sessions cannot both reset the sequence.
CREATE FUNCTION consig_next_id(seq regclass) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  id bigint := nextval(seq);
  base bigint := (consig_timeline() - 1) << 36;
BEGIN
  IF id > base THEN
    RETURN id;
  END IF;
  -- 1668247155 is ASCII "cons"; the second key is the sequence.
  PERFORM pg_advisory_xact_lock(1668247155, seq::oid::int);
  id := nextval(seq);
  IF id <= base THEN
    PERFORM setval(seq, base);
    id := nextval(seq);
  END IF;
  RETURN id;
END
$$;

-- The ids a lender, a feed reader or an operator's command can hold.
ALTER TABLE events ALTER COLUMN id SET DEFAULT consig_next_id('events_id_seq');
ALTER TABLE deliveries ALTER COLUMN id SET DEFAULT consig_next_id('deliveries_id_seq');
ALTER TABLE forward_messages ALTER COLUMN id SET DEFAULT consig_next_id('forward_messages_id_seq');
ALTER TABLE forward_deliveries ALTER COLUMN id SET DEFAULT consig_next_id('forward_deliveries_id_seq');

-- Each timeline this database has written on, and when a replica first saw it. The first replica to
-- see a new one fails the job claims still open from before it (src/cluster/engine.ts
-- `releaseClaimsBefore`): their workers' connections died with the old primary, and waiting for the
-- claims to lapse (expireInSeconds) would pause processing that long after every switchover.
CREATE TABLE cluster_timelines (
  timeline      bigint      PRIMARY KEY,
  first_seen_at timestamptz NOT NULL DEFAULT now()
);
