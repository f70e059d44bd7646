-- 0004: retention (RETENTION_DAYS, `prune`). Bodies of finished events older than the retention
-- are removed; the row and its dedup key stay, so an old delivery sent again is still a duplicate.
ALTER TABLE events ADD COLUMN body_pruned_at TEXT;
