import {
  ACCEPTED_ANSWERS,
  type DeliveryAnswer,
  FAILED_ANSWERS,
  IN_FLIGHT_COUNT_CAP,
  SHARED_RUN_CAP,
  type SharedAnswers,
  type TimedAnswer,
} from '../domain/delivery-alarm';
import { NON_FINAL_STATUSES } from '../domain/lifecycle';
import type { PgSql } from './pg-sql';

/** A value this version does not know (written by a newer one) is left out of the run. */
const KNOWN_ANSWERS = new Set<string>([...ACCEPTED_ANSWERS, ...Object.keys(FAILED_ANSWERS)]);

/**
 * One statement, so one snapshot. Each part is an index walk on `deliveries_received_at` (the
 * latest 200 backwards, the run forwards from it, the maximum) or on `proposals_status`, bounded by
 * its LIMIT. Answers are ordered by `received_at`, each replica's clock: NTP keeps them within
 * milliseconds, far below the seconds between the service's attempts.
 */
const SHARED_ANSWERS_SQL = `
  WITH last_ok AS (
    SELECT received_at AS at FROM deliveries WHERE outcome = ANY($1::text[]) ORDER BY received_at DESC LIMIT 1
  ), run AS (
    SELECT outcome, received_at, id FROM deliveries
    WHERE received_at > coalesce((SELECT at FROM last_ok), '-infinity'::timestamptz)
    ORDER BY received_at, id LIMIT $3
  )
  SELECT (SELECT max(received_at) FROM deliveries) AS last_at,
         (SELECT count(*) FROM (SELECT 1 FROM proposals WHERE status = ANY($2::text[]) LIMIT $4) p) AS in_flight,
         coalesce((SELECT array_agg(outcome ORDER BY received_at, id) FROM run), '{}') AS outcomes,
         coalesce((SELECT array_agg((extract(epoch FROM received_at) * 1000)::float8 ORDER BY received_at, id) FROM run),
                  '{}') AS ats`;

/**
 * The deactivation alarm's view of the whole cluster (interface §6.1, rule 4; see
 * {@link SharedAnswers}), read from PostgreSQL's `deliveries`, where every replica's answers
 * arrive through its relay.
 */
export async function readSharedAnswers(sql: PgSql): Promise<SharedAnswers> {
  const [row] = await sql.query<{
    last_at: Date | null;
    in_flight: string;
    outcomes: string[];
    ats: number[];
  }>(SHARED_ANSWERS_SQL, [
    [...ACCEPTED_ANSWERS],
    [...NON_FINAL_STATUSES],
    SHARED_RUN_CAP,
    IN_FLIGHT_COUNT_CAP,
  ]);
  if (row === undefined) throw new Error('the shared answers query returned no row');
  const run: TimedAnswer[] = [];
  row.outcomes.forEach((outcome, i) => {
    if (KNOWN_ANSWERS.has(outcome)) run.push({ answer: outcome as DeliveryAnswer, at: Number(row.ats[i]) });
  });
  return {
    run,
    lastDeliveryAt: row.last_at === null ? null : row.last_at.getTime(),
    proposalsInFlight: Number(row.in_flight),
  };
}
