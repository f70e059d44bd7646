-- 0009: stuck proposals (issue 12). Forward-only.

-- A proposal is stuck when it has sat at a non-final status longer than that status's limit
-- (STUCK_AFTER): `status = ? AND updated_at < ?`, counted per status at every /metrics scrape and
-- listed oldest first by `proposals --stuck`. proposals_status (status) alone finds the rows of a
-- status but must read each one to test updated_at; with updated_at in the index the count reads
-- only the stuck entries (a covering index range) and the list walks it in order, with
-- nu_proposta (the primary key, part of every index of a WITHOUT ROWID table) breaking ties for
-- keyset pages. Cost: every processed event rewrites updated_at, so this index entry too.
-- proposals_status stays: the delivery alarm's in-flight count relies on it.
CREATE INDEX proposals_status_updated ON proposals (status, updated_at);
