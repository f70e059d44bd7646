-- 0008: order on one time base (issue 36, docs/cluster.md §10). Forward-only.
--
-- A proposal's events were ordered by `received_at`, the acknowledging replica's own clock, and the
-- watermark by each relay's `covered_through` on that same clock: a replica whose clock was off by
-- 100 ms reordered most proposals, and one 1 s behind held everyone's processing back by 1 s. Each
-- replica now stamps what it acknowledges with PostgreSQL's clock as it estimates it (read at every
-- relay heartbeat, extrapolated on its monotonic clock: src/domain/order-time.ts); kicks order by
-- that, and `relay_spools.covered_through` and `held_keys.until` are on the same base from this
-- version on. `received_at` stays the replica's own clock: it is what operators read.

-- PostgreSQL's time when the acknowledging replica took the delivery, as that replica estimated it
-- (cluster only). Ordering a key's pending events uses coalesce(order_at, received_at): the events
-- pending when this runs get their received_at (their replicas' clocks, as before); events a replica
-- of an older version relays during a rolling upgrade have none.
ALTER TABLE events ADD COLUMN order_at timestamptz;
UPDATE events SET order_at = received_at WHERE status IN ('pending', 'failed');

-- The same for each delivery (migrations/0012 adds it to the spool's `deliveries`, so the columns of
-- the two logs stay the same); null for deliveries relayed before this version.
ALTER TABLE deliveries ADD COLUMN order_at timestamptz;
