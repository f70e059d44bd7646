import { connect } from 'node:net';
import Database from '../../src/sqlite/sqlite-driver';
import type { Evento } from '../../src/domain/catalogue';
import { replay } from '../../src/domain/lifecycle';
import { delivery, postRaw, SECRET, signed } from '../helpers/payloads';
import { eventually } from '../helpers/receiver';
import { runCli, serveOnOneFile, spawnServe } from '../helpers/process';

/**
 * Real processes: the receiver is killed with SIGKILL while deliveries are in flight, restarted on
 * the same SQLite file, and every delivery that had received 200 must be stored exactly once.
 */

const files = serveOnOneFile();
const serve = (extra: Record<string, string> = {}) => files.serve(extra);

function send(url: string, body: Record<string, unknown>) {
  const { raw, signature } = signed(body);
  return postRaw(`${url}/webhooks`, raw, {
    'content-type': 'application/json',
    'x-service-signature': signature,
  });
}

it('SIGKILL with deliveries in flight: every 200 is stored exactly once after restart', async () => {
  const first = await serve();
  const acked = new Map<string, number>();
  const failed: string[] = [];
  let stop = false;
  let sent = 0;
  const loop = async () => {
    while (!stop) {
      const body = delivery('proposta.criada');
      const id = (body.metadata as { webhook_id: string }).webhook_id;
      sent += 1;
      try {
        const res = await send(first.url, body);
        if (res.status === 200 && res.body.status === 'accepted') acked.set(id, res.body.event_id);
        else failed.push(id);
      } catch {
        failed.push(id);
        // Connection refused after the kill: the loop ends.
        if (first.child.exitCode !== null || first.child.signalCode !== null) return;
      }
    }
  };
  const loops = Array.from({ length: 16 }, loop);
  // Kill once a good number of deliveries has been acknowledged, with requests still in flight.
  while (acked.size < 400) await new Promise((r) => setTimeout(r, 5));
  first.child.kill('SIGKILL');
  const { signal } = await first.exited;
  stop = true;
  await Promise.all(loops);
  expect(signal).toBe('SIGKILL');
  expect(failed.length).toBeGreaterThan(0); // some were in flight when it died

  const db = new Database(files.dbPath, { readonly: true });
  const rows = db.prepare('SELECT dedup_key, id, status FROM events').all() as {
    dedup_key: string;
    id: number;
  }[];
  db.close();
  const stored = new Map(rows.map((r) => [r.dedup_key, r.id]));
  for (const [id, eventId] of acked) expect(stored.get(id)).toBe(eventId);
  expect(rows.length).toBeGreaterThanOrEqual(acked.size);
  expect(rows.length).toBeLessThanOrEqual(sent);

  // Restart on the same file: it opens, and the service's retries of acknowledged deliveries are
  // duplicates while the ones that never got a 200 are stored now.
  const second = await serve();
  const retryAcked = [...acked.keys()].slice(0, 20);
  for (const id of retryAcked) {
    const res = await send(second.url, delivery('proposta.criada', { webhook_id: id, tentativa: 2 }));
    expect(res.body.status).toBe('duplicate');
  }
  for (const id of failed.slice(0, 20)) {
    const res = await send(second.url, delivery('proposta.criada', { webhook_id: id, tentativa: 2 }));
    expect(res.status).toBe(200);
    expect(['accepted', 'duplicate']).toContain(res.body.status);
  }
  second.child.kill('SIGTERM');
  expect((await second.exited).code).toBe(0);

  const check = new Database(files.dbPath, { readonly: true });
  expect(check.pragma('integrity_check', { simple: true })).toBe('ok');
  const dupKeys = check
    .prepare(
      'SELECT count(*) AS n FROM (SELECT dedup_key FROM events GROUP BY dedup_key HAVING count(*) > 1)',
    )
    .get() as { n: number };
  expect(dupKeys.n).toBe(0);
  check.close();
});

it('SIGTERM finishes in-flight requests, then exits 0; a second signal forces the exit', async () => {
  const s = await serve({ SHUTDOWN_TIMEOUT_MS: '30000' });
  // A request whose body is still arriving when the signal comes.
  const body = signed(delivery('proposta.aprovada', { webhook_id: 'wh_inflight' }));
  const { port } = new URL(s.url);
  const socket = connect(Number(port), '127.0.0.1');
  await new Promise((r) => socket.once('connect', r));
  let answer = '';
  socket.on('data', (d) => (answer += d.toString('utf8')));
  socket.write(
    `POST /webhooks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Service-Signature: ${body.signature}\r\nContent-Length: ${body.raw.length}\r\n\r\n`,
  );
  socket.write(body.raw.subarray(0, 10));
  await new Promise((r) => setTimeout(r, 100));
  s.child.kill('SIGTERM');
  // The signal was handled (the shutdown's log line) and the listener closed (a new connection is
  // refused): the process had its chance to exit, and still waits for the request in flight (were
  // it gone, the 200 below could never come).
  await eventually(() => s.output().includes('shutting down'), 'the shutdown begun');
  await expect(send(s.url, delivery())).rejects.toThrow();
  expect(s.child.exitCode).toBeNull();
  socket.write(body.raw.subarray(10));
  const { code } = await s.exited;
  expect(code).toBe(0);
  expect(answer).toMatch(/^HTTP\/1\.1 200/);
  expect(answer).toContain('"status":"accepted"');
  socket.destroy();
  const db = new Database(files.dbPath, { readonly: true });
  expect(db.prepare("SELECT count(*) AS n FROM events WHERE dedup_key = 'wh_inflight'").get()).toEqual({
    n: 1,
  });
  db.close();
  expect(s.output()).toContain('consig-receiver stopped');

  // Second signal: a request that never completes would hold the shutdown; the second SIGTERM ends it.
  const t = await serve({ SHUTDOWN_TIMEOUT_MS: '60000' });
  const stuck = connect(Number(new URL(t.url).port), '127.0.0.1');
  await new Promise((r) => stuck.once('connect', r));
  stuck.write(`POST /webhooks HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{`);
  await new Promise((r) => setTimeout(r, 100));
  t.child.kill('SIGTERM');
  // The first signal handled; the process waits for the stuck request (had it exited, the second
  // signal below would find it gone, and its exit code would not be 130).
  await eventually(() => t.output().includes('shutting down'), 'the shutdown begun');
  expect(t.child.exitCode).toBeNull();
  t.child.kill('SIGTERM');
  const forced = await t.exited;
  expect(forced.code).toBe(130);
  expect(t.output()).toContain('second signal: forcing exit');
  stuck.destroy();
});

it('SIGKILL while the pipeline is busy: after restart every stored event is processed exactly once', async () => {
  // A stored backlog (as after an outage) that the pipeline starts draining as soon as it starts.
  expect(runCli(['migrate'], { DATABASE_PATH: files.dbPath }).status).toBe(0);
  const PROPOSALS = 12_000;
  const eventos = [
    'proposta.criada',
    'proposta.pre_aprovada',
    'proposta.aprovada',
    'averbacao.solicitada',
    'averbacao.aprovada',
  ];
  const fill = new Database(files.dbPath);
  const insert = fill.prepare(
    `INSERT INTO events (dedup_key, webhook_id, kind, evento, nu_proposta, received_at, body, body_bytes, status)
     VALUES (?, ?, 'event', ?, ?, '2026-11-21T00:00:00.000Z', ?, 0, 'pending')`,
  );
  let total = 0;
  fill.transaction(() => {
    for (let p = 0; p < PROPOSALS; p++) {
      // Every fifth proposal receives its events out of order.
      const order = p % 5 === 0 ? [...eventos].reverse() : eventos;
      order.forEach((evento, i) => {
        const body = JSON.stringify(
          delivery(evento, { nu_proposta: 70000 + p, webhook_id: `wh_k_${p}_${i}` }),
        );
        insert.run(`wh_k_${p}_${i}`, `wh_k_${p}_${i}`, evento, 70000 + p, body);
        total += 1;
      });
    }
  })();
  fill.close();

  // Not waiting for "listening": the backlog starts draining before the server listens.
  const first = spawnServe({ DATABASE_PATH: files.dbPath, WEBHOOK_SECRETS: SECRET });
  const watch = new Database(files.dbPath, { readonly: true });
  const count = (status: string) =>
    (watch.prepare('SELECT count(*) AS n FROM events WHERE status = ?').get(status) as { n: number }).n;
  const until = Date.now() + 30_000;
  while (count('done') < 2000 && Date.now() < until) await new Promise((r) => setTimeout(r, 1));
  const exited = new Promise((r) => first.child.once('exit', r));
  first.child.kill('SIGKILL');
  await exited;
  const pendingAtKill = count('pending');
  watch.close();
  expect(pendingAtKill).toBeGreaterThan(0); // the queue was busy when it died

  await serve();
  const db = new Database(files.dbPath, { readonly: true });
  try {
    // Bounds for a hung test, not the machine's speed: 60 000 events drained on a loaded 2-core
    // machine took more than jest's default 60 s for the whole test.
    const drainUntil = Date.now() + 180_000;
    while (
      (db.prepare("SELECT count(*) AS n FROM events WHERE status != 'done'").get() as { n: number }).n > 0
    ) {
      if (Date.now() > drainUntil) throw new Error('backlog not drained');
      await new Promise((r) => setTimeout(r, 20));
    }
    expect((db.prepare('SELECT count(*) AS n FROM proposal_transitions').get() as { n: number }).n).toBe(
      total,
    );
    // Per proposal, what applied is exactly what the pure machine predicts for the received order.
    const rows = db
      .prepare(
        'SELECT e.nu_proposta AS nu, e.evento, t.applied FROM events e JOIN proposal_transitions t ON t.event_id = e.id ORDER BY e.id',
      )
      .all() as { nu: number; evento: Evento; applied: number }[];
    const byProposal = new Map<number, { evento: Evento; applied: number }[]>();
    for (const row of rows) byProposal.set(row.nu, [...(byProposal.get(row.nu) ?? []), row]);
    expect(byProposal.size).toBe(PROPOSALS);
    for (const [, list] of byProposal) {
      const predicted = replay(list.map((l) => l.evento));
      expect(list.map((l) => l.applied === 1)).toEqual(predicted.transitions.map((t) => t.applied));
    }
    const statuses = db
      .prepare('SELECT status, count(*) AS n FROM proposals GROUP BY status ORDER BY status')
      .all();
    // In order or reversed (first seen at averbada, the rest late), every proposal ends averbada.
    expect(statuses).toEqual([{ status: 'averbada', n: PROPOSALS }]);
  } finally {
    db.close();
  }
}, 300_000);
