import Database from '../../src/sqlite/sqlite-driver';
import { delivery, HAPPY_PATH, postRaw, signed } from '../helpers/payloads';
import { type ServerProcess, serveOnOneFile } from '../helpers/process';

/**
 * Several receivers on one database file (a rolling deploy overlapping on one volume): every one
 * ingests, exactly one processes. Real processes, each delivery sent to both, the processing holder
 * SIGKILLed or SIGTERMed under load. Afterwards the file must look as if one process had received
 * everything: nothing pending, each event processed once, every proposal's events applied in the
 * order they were sent.
 */

const files = serveOnOneFile({ PROCESSING_LEASE_MS: '1000' }, 'consig.db');
const serve = () => files.serve();

async function isHolder(s: ServerProcess): Promise<boolean> {
  const text = await (await fetch(`${s.url}/metrics`)).text();
  return /^consig_processing_holder 1$/m.test(text);
}

async function until(predicate: () => Promise<boolean> | boolean, what: string, timeoutMs = 30_000) {
  const end = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > end) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The one holder among `candidates`, once exactly one says so. */
async function holderOf(candidates: ServerProcess[]): Promise<ServerProcess> {
  let found: ServerProcess[] = [];
  await until(async () => {
    found = [];
    for (const s of candidates) if (await isHolder(s)) found.push(s);
    return found.length === 1;
  }, 'exactly one processing holder');
  return found[0] as ServerProcess;
}

/** Sends one delivery to every target at once; true when at least one answered 200. */
async function sendToAll(targets: () => ServerProcess[], body: Record<string, unknown>): Promise<boolean> {
  const { raw, signature } = signed(body);
  const answers = await Promise.all(
    targets().map((s) =>
      postRaw(`${s.url}/webhooks`, raw, { 'x-service-signature': signature }).then(
        (r) => r.status,
        () => 0,
      ),
    ),
  );
  return answers.includes(200);
}

/**
 * Drives `count` proposals down the happy path, 12 at a time, each event sent only after the
 * previous one of its proposal was acknowledged. `midway` runs once half of the events are sent.
 */
async function drive(
  count: number,
  base: number,
  targets: () => ServerProcess[],
  midway: () => Promise<void> = async () => undefined,
): Promise<void> {
  let sent = 0;
  let midwayRun: Promise<void> | null = null;
  const total = count * HAPPY_PATH.length;
  const one = async (nu: number) => {
    for (const evento of HAPPY_PATH) {
      const body = delivery(evento, { nu_proposta: nu, webhook_id: `wh_${nu}_${evento}` });
      await until(() => sendToAll(targets, body), `a 200 for ${nu} ${evento}`);
      sent += 1;
      if (sent === Math.floor(total / 2)) midwayRun = midway();
    }
  };
  const queue = Array.from({ length: count }, (_, i) => base + i);
  await Promise.all(
    Array.from({ length: 12 }, async () => {
      for (let nu = queue.shift(); nu !== undefined; nu = queue.shift()) await one(nu);
    }),
  );
  await midwayRun;
}

interface Outcome {
  pending: number;
  events: number;
  transitions: number;
  notApplied: number;
  notPaid: number;
  outOfOrder: number;
}

function outcome(): Outcome {
  const db = new Database(files.dbPath, { readonly: true });
  try {
    const n = (sql: string) => (db.prepare(sql).get() as { n: number }).n;
    const rows = db
      .prepare('SELECT nu_proposta, evento FROM proposal_transitions ORDER BY nu_proposta, event_id')
      .all() as { nu_proposta: number; evento: string }[];
    const byProposal = new Map<number, string[]>();
    for (const r of rows) byProposal.set(r.nu_proposta, [...(byProposal.get(r.nu_proposta) ?? []), r.evento]);
    const outOfOrder = [...byProposal.values()].filter((e) => e.join() !== HAPPY_PATH.join()).length;
    return {
      pending: n("SELECT count(*) AS n FROM events WHERE status IN ('pending', 'failed')"),
      events: n('SELECT count(*) AS n FROM events'),
      transitions: n('SELECT count(*) AS n FROM proposal_transitions'),
      notApplied: n('SELECT count(*) AS n FROM proposal_transitions WHERE applied = 0'),
      notPaid: n("SELECT count(*) AS n FROM proposals WHERE status <> 'paga'"),
      outOfOrder,
    };
  } finally {
    db.close();
  }
}

async function settled(count: number): Promise<Outcome> {
  await until(() => {
    const o = outcome();
    return o.pending === 0 && o.transitions === count * HAPPY_PATH.length;
  }, 'every event processed');
  return outcome();
}

function expectLikeOneProcess(o: Outcome, count: number): void {
  expect(o).toEqual({
    pending: 0,
    events: count * HAPPY_PATH.length,
    transitions: count * HAPPY_PATH.length,
    notApplied: 0,
    notPaid: 0,
    outOfOrder: 0,
  });
}

it('two receivers on one file, each delivery sent to both: one processes, in order, as one process would', async () => {
  const a = await serve();
  const b = await serve();
  const holder = await holderOf([a, b]);
  await drive(40, 1000, () => [a, b]);
  expectLikeOneProcess(await settled(40), 40);
  // The standby stored some of the events (it answered first), and processed none of them.
  expect(await isHolder(holder)).toBe(true);
  const standby = holder === a ? b : a;
  expect(await isHolder(standby)).toBe(false);
  // Both are ready (both ingest); /readyz says which one processes.
  expect(await (await fetch(`${holder.url}/readyz`)).json()).toEqual({ status: 'ready', processing: true });
  const standbyReady = await fetch(`${standby.url}/readyz`);
  expect(standbyReady.status).toBe(200);
  expect(await standbyReady.json()).toEqual({ status: 'ready', processing: false });
});

it.each(['SIGKILL', 'SIGTERM'] as const)(
  'the processing holder gets %s under load: the other takes over, nothing stays pending, nothing is processed twice',
  async (signal) => {
    const a = await serve();
    const b = await serve();
    const holder = await holderOf([a, b]);
    const other = holder === a ? b : a;
    let alive = [a, b];
    let handOverMs = 0;
    const stopHolder = async () => {
      alive = [other];
      const t0 = Date.now();
      holder.child.kill(signal);
      await holder.exited;
      await until(() => isHolder(other), 'the standby takes over');
      handOverMs = Date.now() - t0;
    };
    await drive(40, 2000, () => alive, stopHolder);
    expectLikeOneProcess(await settled(40), 40);
    // Informative, not asserted: a SIGKILLed holder's lease must expire (PROCESSING_LEASE_MS 1000
    // here), a SIGTERMed one hands it over at once.
    console.log(`${signal}: hand-over took ${handOverMs} ms`);
  },
);
