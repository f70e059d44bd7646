import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import Database from '../../src/sqlite/sqlite-driver';
import { delivery, signed } from '../helpers/payloads';
import { serveOnOneFile } from '../helpers/process';

/**
 * The 5-second promise while another connection holds the write lock (issue 10, item 3): a real
 * `serve` under signed load, a second process holding `BEGIN IMMEDIATE` on the file for 10 s, and
 * `/readyz` polled every 100 ms. The service gives up on an answer after 5 s (interface §6.1), so
 * every answer, 200 or 503 + Retry-After, must leave well inside 5 s as the client measures it,
 * and the receiver's log must say what the sender saw. Nothing acknowledged may be lost, nothing
 * stored twice, and processing resumes when the lock goes.
 */

const LOCK_MS = 10_000;
/** The contract's deadline (interface §6.1): the sender's timeout. */
const SENDER_TIMEOUT_MS = 5_000;
const SENDERS = 8;
/** How long a request waits for the lock before its 503 (SQLITE_BUSY_TIMEOUT_MS, its default). */
const LOCK_WAIT_MS = 1_000;

const files = serveOnOneFile({ SQLITE_BUSY_TIMEOUT_MS: String(LOCK_WAIT_MS) }, 'consig.db');

interface Answer {
  webhookId: string;
  status: number; // 0: no answer
  ms: number;
  retryAfter: string | null;
  at: number;
}

/** The receiver's own choice of better-sqlite3 for this Node (12.x on Node 20, 13.x from 22), built. */
const DRIVER = join(__dirname, '..', '..', 'dist', 'src', 'sqlite', 'sqlite-driver.js');

/** Holds the file's write lock from another process; resolves once it holds it. */
function holdWriteLock(path: string, ms: number): Promise<{ child: ChildProcess; released: Promise<void> }> {
  const script = `
    const Database = require(${JSON.stringify(DRIVER)}).default;
    const db = new Database(process.argv[1]);
    db.pragma('busy_timeout = 10000');
    db.exec('BEGIN IMMEDIATE');
    process.stdout.write('locked\\n');
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, Number(process.argv[2]));
    db.exec('ROLLBACK');
    db.close();
  `;
  const child = spawn(process.execPath, ['-e', script, path, String(ms)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr?.on('data', (c: Buffer) => (err += c.toString()));
  const released = new Promise<void>((resolve, reject) =>
    child.once('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`lock holder exited ${code}: ${err}`)),
    ),
  );
  return new Promise((resolve, reject) => {
    child.stdout?.on('data', (c: Buffer) => {
      if (c.toString().includes('locked')) resolve({ child, released });
    });
    released.catch(reject);
  });
}

async function post(url: string, body: Record<string, unknown>): Promise<Answer> {
  const { raw, signature } = signed(body);
  const webhookId = String((body.metadata as { webhook_id: string }).webhook_id);
  const started = performance.now();
  try {
    const res = await fetch(`${url}/webhooks`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-service-signature': signature },
      body: raw,
      signal: AbortSignal.timeout(30_000),
    });
    await res.arrayBuffer();
    return {
      webhookId,
      status: res.status,
      ms: performance.now() - started,
      retryAfter: res.headers.get('retry-after'),
      at: started,
    };
  } catch {
    return { webhookId, status: 0, ms: performance.now() - started, retryAfter: null, at: started };
  }
}

it('a write lock held 10 s by another process under load: every answer within 5 s, nothing lost, the log says what the sender saw', async () => {
  const s = await files.serve();
  const bodies = new Map<string, Record<string, unknown>>();
  const answers: Answer[] = [];
  const probes: Answer[] = [];
  let n = 0;
  let sending = true;
  const sender = async () => {
    while (sending) {
      n += 1;
      const body = delivery('proposta.criada', { nu_proposta: 700_000 + n, webhook_id: `wh_lock_${n}` });
      bodies.set(`wh_lock_${n}`, body);
      answers.push(await post(s.url, body));
    }
  };
  const senders = Array.from({ length: SENDERS }, () => sender());
  const prober = (async () => {
    while (sending) {
      const started = performance.now();
      const res = await fetch(`${s.url}/readyz`, { signal: AbortSignal.timeout(30_000) }).catch(() => null);
      if (res) await res.arrayBuffer();
      probes.push({
        webhookId: '',
        status: res?.status ?? 0,
        ms: performance.now() - started,
        retryAfter: res?.headers.get('retry-after') ?? null,
        at: started,
      });
      await new Promise((r) => setTimeout(r, 100));
    }
  })();

  await new Promise((r) => setTimeout(r, 1000)); // load before the lock
  const lock = await holdWriteLock(files.dbPath, LOCK_MS);
  const lockedAt = performance.now();
  await lock.released;
  const releasedAt = performance.now();
  await new Promise((r) => setTimeout(r, 1000)); // and after it
  sending = false;
  await Promise.all([...senders, prober]);

  // The lock was real: deliveries and probes during it were refused.
  const during = (a: Answer) => a.at > lockedAt + 100 && a.at + a.ms < releasedAt - 100;
  expect(answers.filter(during).some((a) => a.status === 503)).toBe(true);
  expect(probes.filter(during).some((a) => a.status === 503)).toBe(true);
  // Every answer left inside the sender's timeout, and every refusal says when to come back.
  const worst = Math.max(...answers.map((a) => a.ms));
  const worstProbe = Math.max(...probes.map((a) => a.ms));
  expect(answers.every((a) => a.status === 200 || a.status === 503)).toBe(true);
  expect(worst).toBeLessThan(SENDER_TIMEOUT_MS);
  expect(worstProbe).toBeLessThan(SENDER_TIMEOUT_MS);
  for (const a of [...answers, ...probes].filter((x) => x.status === 503))
    expect(a.retryAfter).toMatch(/^\d+$/);
  // Ready again once the lock went.
  expect(probes.at(-1)?.status).toBe(200);

  // The log's `ms` is the receiver's measure of what the sender saw: its clock starts when it reads
  // the request. The client's own time differs from it by what the network and both event loops add, which
  // depends on the machine's load: no bound is put on that difference (a timing window fails on a
  // busy machine with no bug behind it). What is checked is structural: every answer is logged with
  // its `ms`, and each refusal for the lock logged the wait that made it.
  // The child's stdout reaches this process through a pipe: on a loaded machine the last lines
  // arrive a moment after the last answers. Wait for every answered delivery's line.
  const logged = new Map<string, number>();
  const readLog = () => {
    for (const line of s.output().split('\n')) {
      if (!line.includes('"webhook_id":"wh_lock_')) continue;
      const entry = JSON.parse(line) as { webhook_id: string; ms?: number };
      if (typeof entry.ms === 'number') logged.set(entry.webhook_id, entry.ms);
    }
    return answers.every((a) => logged.has(a.webhookId));
  };
  for (let waited = 0; !readLog() && waited < 10_000; waited += 50)
    await new Promise((r) => setTimeout(r, 50));
  const gaps = answers.map((a) => a.ms - (logged.get(a.webhookId) ?? Number.NaN));
  expect(gaps.every((g) => Number.isFinite(g))).toBe(true);
  const worstGap = Math.max(...gaps);
  // A refusal for the lock counts the wait that made it: each waited LOCK_WAIT_MS by the receiver's
  // own clock before its 503, so its log line says at least that.
  const refused = answers.filter((a) => a.status === 503);
  expect(refused.length).toBeGreaterThan(0);
  const shortRefusals = refused
    .map((a) => ({ webhookId: a.webhookId, loggedMs: logged.get(a.webhookId) ?? 0 }))
    .filter((r) => r.loggedMs < LOCK_WAIT_MS);
  expect(shortRefusals).toEqual([]);

  // The sender retries what was refused: then every delivery is stored once and processed.
  for (const a of answers.filter((x) => x.status !== 200)) {
    const again = await post(s.url, bodies.get(a.webhookId) as Record<string, unknown>);
    expect(again.status).toBe(200);
  }
  const db = new Database(files.dbPath, { readonly: true });
  try {
    const stored = db
      .prepare(
        "SELECT count(*) AS n, count(DISTINCT webhook_id) AS d FROM events WHERE webhook_id LIKE 'wh_lock_%'",
      )
      .get() as { n: number; d: number };
    expect(stored).toEqual({ n: bodies.size, d: bodies.size });
    const deadline = Date.now() + 30_000;
    const pending = () =>
      (db.prepare("SELECT count(*) AS n FROM events WHERE status != 'done'").get() as { n: number }).n;
    while (pending() > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(pending()).toBe(0);
  } finally {
    db.close();
  }
  if (process.env.HELD_LOCK_REPORT)
    process.stdout.write(
      `held-lock: ${answers.length} deliveries (${answers.filter((a) => a.status === 503).length} answered 503), ${probes.length} probes; worst delivery answer ${worst.toFixed(0)} ms, worst /readyz ${worstProbe.toFixed(0)} ms, worst client-minus-log gap ${worstGap.toFixed(0)} ms\n`,
    );
});
