import { openSpool } from '../../src/store/spool';
import { clusterBed } from '../helpers/cluster-bed';
import { count, rows, waitFor } from '../helpers/cluster-db';
import { sendBurst as burst, type TestReceiver } from '../helpers/receiver';

/**
 * Issue 23 in cluster mode: while a webhook answer is being made on a replica, its background work
 * waits — the relay (spool → PostgreSQL) and the kicks (pg-boss jobs → processing) — and nothing is
 * dropped: the spool keeps what it acknowledged, PostgreSQL keeps the pending events. A real
 * replica (the whole receiver with DATABASE_URL) on a real PostgreSQL. No durations are asserted:
 * counters before and after a burst.
 *
 * An answer "being made" is held open with `receiver.answers.begin()` (see answer-first.test.ts
 * for why); the floor slice is set beyond the test's length.
 */

const NO_SLICE = { maxDeferMs: 3_600_000, sliceMs: 1 };
const bed = clusterBed({ prefix: 'answer_first' });

const pending = () => count(bed.pool, "SELECT count(*) AS n FROM events WHERE status = 'pending'");
const done = () => count(bed.pool, "SELECT count(*) AS n FROM events WHERE status = 'done'");
const inPostgres = () => count(bed.pool, 'SELECT count(*) AS n FROM events');
const spooled = (r: TestReceiver) => openSpool(r.store.db).backlog().count;

/** A few relay intervals (20 ms) and pg-boss fetches: time enough for background work to move. */
async function idle(): Promise<void> {
  for (let i = 0; i < 15; i += 1) await new Promise((resolve) => setTimeout(resolve, 20));
}

it('a burst is answered while the relay and the kicks wait; once no answer is being made everything is processed, in order', async () => {
  const r = await bed.replica({}, { deferral: NO_SLICE });
  await burst(r, 931_000, 10, 10);
  await waitFor(async () => (await done()) === 10, '10 events processed');

  r.answers.begin(); // an answer is being made from here on
  await burst(r, 932_000, 60, 20);
  // The relay waits: the burst stays in the spool, acknowledged, and PostgreSQL has none of it.
  await idle();
  expect(spooled(r)).toBe(60);
  expect(await inPostgres()).toBe(10);

  // Moved to PostgreSQL by hand (the relay's own batches, bypassing its loop): the kicks are queued
  // in pg-boss, and the workers wait at the gate with them.
  await r.cluster!.drainSpool();
  expect(spooled(r)).toBe(0);
  expect(await pending()).toBe(60);
  await idle();
  expect(await pending()).toBe(60);
  expect(await done()).toBe(10);

  r.answers.end(); // no answer being made: the backlog drains
  await waitFor(async () => (await done()) === 70, 'the 70 events processed');
  // Per proposal, in the order received: each transition's event follows the one before, all applied.
  const lines = await rows<{ event_ids: string[]; applied: boolean[] }>(
    bed.pool,
    `SELECT array_agg(event_id::text ORDER BY id) AS event_ids, array_agg(applied ORDER BY id) AS applied
     FROM proposal_transitions WHERE nu_proposta LIKE '932%' GROUP BY nu_proposta`,
  );
  expect(lines).toHaveLength(20);
  for (const line of lines) {
    const ids = line.event_ids.map(Number);
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    expect(line.applied).toEqual([true, true, true]);
  }
  expect(r.answers.snapshot().deferredMsTotal).toBeGreaterThan(0);
});
