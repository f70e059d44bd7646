-- 0012: a cluster replica's order time (issue 36, docs/cluster.md §10). Forward-only.
--
-- In cluster mode this file is the replica's spool: each delivery is stamped, when its request
-- arrives, with PostgreSQL's clock as this replica estimates it (src/domain/order-time.ts), and the
-- relay orders its event in PostgreSQL by that rather than by received_at (this replica's own
-- clock, kept as it is: operators read it). NULL in SQLite mode, and before the relay's first
-- heartbeat (the relay then uses received_at).
ALTER TABLE deliveries ADD COLUMN order_at TEXT;
