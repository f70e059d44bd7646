import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ConsoleClient, squash } from '../helpers/console-client';
import { FakeDestination, orderViolations } from '../helpers/destination';
import { eventually, sendBurst as burst, startTestReceiver, type TestReceiver } from '../helpers/receiver';
import { tempDir } from '../helpers/tmp';

/**
 * Issue 23: the answer comes first. While a webhook answer is being made, background work
 * (the pipeline's turns, the sender thread's sends and the writing of its records) waits in its
 * durable backlog; the answers never wait for it. The real receiver (SQLite mode, the sender on its
 * worker thread) and a real destination on loopback. No durations are asserted: the tests compare
 * counters (events processed, requests the destination received) before and after a burst.
 *
 * An answer "being made" is held open with `receiver.answers.begin()`: on the wire a request
 * counts from its whole body to its answer, a few hundred microseconds, too short to hold a
 * backlog still long enough to look at it. The floor slice is set beyond the test's length.
 */

const SECRET = `whsec_${Buffer.from('answer-first-destination-secret').toString('base64')}`;
const NO_SLICE = { maxDeferMs: 3_600_000, sliceMs: 1 };

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

const TOKEN = 'answer-first-admin-token-0123456789';

async function setUp(): Promise<{ r: TestReceiver; d: FakeDestination }> {
  const d = await FakeDestination.start();
  const tmp = tempDir('consig-answer-first-');
  const file = join(tmp.dir, 'destinations.json');
  const destination = {
    name: 'crm',
    url: d.url,
    secret: SECRET,
    timeout_ms: 2000,
    retry: { schedule_ms: Array.from({ length: 50 }, () => 20) },
  };
  writeFileSync(file, JSON.stringify({ destinations: [destination] }));
  const r = await startTestReceiver({
    dir: tmp.dir,
    env: { DESTINATIONS_FILE: file, ADMIN_TOKEN: TOKEN },
    deferral: NO_SLICE,
  });
  // The destination closes first: a receiver stopping waits for its requests in flight.
  cleanups.push(
    () => d.close(),
    () => r.stop(),
    () => tmp.cleanup(),
  );
  return { r, d };
}

const count = (r: TestReceiver, sql: string): number => (r.store.db.prepare(sql).get() as { n: number }).n;
const pendingEvents = (r: TestReceiver) =>
  count(r, "SELECT count(*) AS n FROM events WHERE status = 'pending'");
const doneEvents = (r: TestReceiver) => count(r, "SELECT count(*) AS n FROM events WHERE status = 'done'");
const messages = (r: TestReceiver) => count(r, 'SELECT count(*) AS n FROM forward_messages');
const delivered = (r: TestReceiver) =>
  count(r, "SELECT count(*) AS n FROM forward_deliveries WHERE status = 'delivered'");

/** Pauses or resumes the destination, as an operator does (`forwards pause` / `resume`). */
async function setPaused(r: TestReceiver, paused: boolean): Promise<void> {
  const res = await fetch(`${r.url}/admin/destinations/crm/${paused ? 'pause' : 'resume'}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  expect(res.status).toBe(200);
}

it('a burst is answered while the backlog to process and to forward stays where it was; once no answer is being made it drains, in order', async () => {
  const { r, d } = await setUp();
  // A backlog to forward: 10 events processed while the destination is paused (20 messages).
  await setPaused(r, true);
  await burst(r, 923_000, 10, 10);
  await eventually(() => doneEvents(r) === 10 && messages(r) === 20, '10 events processed');
  // The webhook path reports its answers (each from its whole body to its 200).
  expect(r.answers.begun).toBe(10);

  r.answers.begin(); // an answer is being made from here on
  await setPaused(r, false); // the sender may send again, as far as the operator is concerned
  const sentBefore = d.requests.length;
  const deliveredBefore = delivered(r);

  // The burst: 60 more deliveries (a backlog to process), every one answered 200.
  await burst(r, 924_000, 60, 20);
  expect(r.answers.begun).toBe(1 + 70);
  // Give the background every chance to move (the sender looks every 50 ms): it must not.
  for (let i = 0; i < 10; i += 1) await new Promise((resolve) => setTimeout(resolve, 20));
  expect(pendingEvents(r)).toBe(60);
  expect(doneEvents(r)).toBe(10);
  expect(messages(r)).toBe(20);
  expect(d.requests.length).toBe(sentBefore);
  expect(delivered(r)).toBe(deliveredBefore);

  // The console's overview says so (a signed-in operator's page, not a webhook: it does not hold).
  const c = new ConsoleClient(r.url);
  await c.signIn(TOKEN);
  const overview = squash((await c.get('/console')).text);
  expect(overview).toContain('Background work deferred');
  expect(overview).toContain('waiting now');

  r.answers.end(); // no answer being made: the backlog drains
  await eventually(() => doneEvents(r) === 70, 'the 70 events processed');
  await eventually(() => delivered(r) === 140, 'the 140 messages delivered');
  const stored = r.store.db
    .prepare('SELECT id, webhook_id, nu_proposta FROM forward_messages ORDER BY id')
    .all() as { id: number; webhook_id: string; nu_proposta: number | null }[];
  expect(orderViolations(d, stored)).toEqual([]);
  // The time it waited is counted (the metric behind the overload alert and the console).
  expect(r.answers.snapshot().deferredMsTotal).toBeGreaterThan(0);
});
