/**
 * Statements both stores run as they are, SQLite (sqlite/store.ts `averbacoesRepo`) and PostgreSQL
 * (runtime/cluster/poll-job.ts): one text, with PostgreSQL's numbered `$1` placeholders, which SQLite runs
 * as `?`, each bound by position with the value its number names (sqlite/sqlite-prepare.ts
 * `prepareShared`). They live in
 * domain/ only because it is the one folder both stores may import (postgres/ and sqlite/ import
 * nothing else of the receiver but core/); they are text, and run nothing. A statement whose dialects disagree stays in its
 * store.
 */

/**
 * Records a poll: attempts, when the next one is due, the outcome. A final result (the webhook's)
 * or a stale mark that landed while the poll was in flight keeps polling off. `NULLIF(next_poll_at,
 * next_poll_at)` is NULL typed as the column, so that PostgreSQL types `$3` as a timestamp (a bare
 * NULL would make the CASE text); `OR stale` reads SQLite's 0/1 and PostgreSQL's boolean alike.
 * Returns whether the registration is still polled.
 * $1 request_id, $2 attempts, $3 next poll (ISO-8601 or null), $4 now, $5 last_poll_outcome.
 */
export const RECORD_POLL = `UPDATE averbacoes SET poll_attempts = $2,
  next_poll_at = CASE WHEN status IN ('completed', 'error') OR stale
    THEN NULLIF(next_poll_at, next_poll_at) ELSE $3 END,
  last_poll_at = $4, last_poll_outcome = $5, updated_at = $4
WHERE request_id = $1 RETURNING next_poll_at IS NOT NULL AS polling`;

/** Stops polling a registration for good ($1 request_id, $2 now); `true` is 1 in SQLite. */
export const MARK_STALE =
  'UPDATE averbacoes SET stale = true, next_poll_at = NULL, updated_at = $2 WHERE request_id = $1';
