import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { HOST, sleep } from '../../rigs/harness';
import { type Haproxy, startHaproxy } from '../helpers/haproxy';
import { tempDir } from '../helpers/tmp';

/**
 * The shipped balancer (deploy/compose/haproxy.cfg) when replicas refuse work, as they do in a
 * rollout across a breaking migration (issue 46, item 1): every replica of the previous release
 * answers webhooks and /readyz 503 from the moment the migration lands, and the rollout then stops
 * them one after the other; the new replica that applied it is ready before HAProxy's checks have
 * seen it.
 *
 * - Two of three replicas HAProxy has UP start refusing. With `retries 2`, `inter 2s fall 2`, the
 *   retries could go from one refusing replica to the other and back, never meeting the third:
 *   CI saw 18 deliveries answered 503 so in the upgrade tier's d2, and here 100 to 106 of about
 *   470. Now: checks every 500 ms that take a replica out at its first failure, a replica taken
 *   out at the first delivery it fails (`observe layer7`), six retries.
 * - No replica ready, one of them taking deliveries (a replica not ready acknowledges webhooks in
 *   some states: `not_ordered_yet`; and a ready one HAProxy has not yet seen): HAProxy answered
 *   every delivery 503 itself; now it gives them to every replica that runs (`last-resort`).
 *
 * The replicas here are small HTTP servers that answer as a replica does: the upgrade tier runs the
 * real ones; this isolates the balancer's part, at a rate and overlap where the old figures showed
 * on every run.
 */

type State =
  /** /readyz and deliveries 200. */
  | 'works'
  /** /readyz and deliveries 503 with Retry-After (a refused schema). */
  | 'refuses'
  /** /readyz 503, deliveries 200 (`not_ordered_yet`). */
  | 'unready'
  /** No listener. */
  | 'stopped';

interface FakeReplica {
  name: string;
  port: number;
  set(state: State): Promise<void>;
  /** Deliveries it answered, by status. */
  answered(status: number): number;
  close(): Promise<void>;
}

async function fakeReplica(name: string): Promise<FakeReplica> {
  let state: State = 'works';
  let port = 0;
  let server: Server | null = null;
  const answered = new Map<number, number>();
  const listen = async () => {
    const s = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const delivery = req.method === 'POST';
        const ok = req.url === '/healthz' || state === 'works' || (state === 'unready' && delivery);
        const status = ok ? 200 : 503;
        if (delivery) answered.set(status, (answered.get(status) ?? 0) + 1);
        // A refusal on a loaded machine takes tens of milliseconds (CI's d2: 3 to 21 ms).
        setTimeout(
          () =>
            res
              .writeHead(status, {
                'content-type': 'application/json',
                ...(ok ? {} : { 'retry-after': '1' }),
              })
              .end(ok ? '{"ok":true}' : '{"error":"schema_incompatible"}'),
          ok ? 0 : 20,
        );
      });
    });
    await new Promise<void>((done) => s.listen(port, HOST, done));
    port = (s.address() as AddressInfo).port;
    server = s;
  };
  const close = async () => {
    const s = server;
    server = null;
    if (s === null) return;
    s.closeAllConnections();
    await new Promise<void>((done) => s.close(() => done()));
  };
  await listen();
  return {
    name,
    get port() {
      return port;
    },
    set: async (next) => {
      if (next === 'stopped') await close();
      else if (state === 'stopped') await listen();
      state = next;
    },
    answered: (status) => answered.get(status) ?? 0,
    close,
  };
}

function post(port: number): Promise<number> {
  return new Promise((done) => {
    const req = request(
      {
        host: HOST,
        port,
        path: '/webhooks',
        method: 'POST',
        headers: { 'content-type': 'application/json' },
      },
      (res) => {
        res.resume();
        res.on('end', () => done(res.statusCode ?? 0));
      },
    );
    req.on('error', () => done(0));
    req.end('{"metadata":{"webhook_id":"wh_balancer"}}');
  });
}

/**
 * 160 deliveries/s for 3 s through the balancer, four at a time (deliveries overlap at the
 * balancer, as the service's do under load); `at`, if given, runs once, 0.3 s in.
 */
async function load(lb: Haproxy, at: () => Promise<void> = async () => {}): Promise<number[]> {
  const answers: Promise<number>[] = [];
  const start = Date.now();
  let done = false;
  while (Date.now() - start < 3000) {
    if (!done && Date.now() - start >= 300) {
      done = true;
      await at();
    }
    for (let i = 0; i < 4; i++) answers.push(post(lb.port));
    await sleep(25);
  }
  return Promise.all(answers);
}

function notOk(statuses: number[]): { notOk: number; statuses: number[] } {
  const bad = statuses.filter((s) => s !== 200);
  return { notOk: bad.length, statuses: [...new Set(bad)] };
}

/** Resolves once HAProxy's readiness-checked backend has none of `names` UP. */
async function outOfRotation(lb: Haproxy, names: string[]): Promise<void> {
  const until = Date.now() + 15_000;
  for (;;) {
    const stats = await lb.stats();
    if (names.every((n) => !(stats.get(n)?.status ?? '').startsWith('UP'))) return;
    if (Date.now() > until) throw new Error(`still in rotation: ${JSON.stringify([...stats])}`);
    await sleep(50);
  }
}

describe('the shipped HAProxy configuration, when replicas refuse work', () => {
  let tmp: ReturnType<typeof tempDir>;
  let lb: Haproxy;
  let replicas: [FakeReplica, FakeReplica, FakeReplica];

  beforeEach(async () => {
    tmp = tempDir('consig-balancer-');
    replicas = [await fakeReplica('s1'), await fakeReplica('s2'), await fakeReplica('s3')];
    lb = await startHaproxy(tmp.dir, replicas);
    for (const r of replicas) await lb.waitUp(r.name);
  });

  afterEach(async () => {
    await lb.stop();
    for (const r of replicas) await r.close();
    tmp.cleanup();
  });

  it('two of three it has UP start refusing: every delivery answered 200, before its checks take them out', async () => {
    const [, s2, s3] = replicas;
    // s3 refuses (503), s2 stops: a replica of the previous release on a breaking migration, then
    // under the rollout.
    const statuses = await load(lb, async () => {
      await s3.set('refuses');
      await s2.set('stopped');
    });
    expect(notOk(statuses)).toEqual({ notOk: 0, statuses: [] });
    // The test bit: the refusing replica was given deliveries (HAProxy had it UP), and both are out now.
    expect(s3.answered(503)).toBeGreaterThan(0);
    await outOfRotation(lb, ['s2', 's3']);
    expect(statuses.length).toBeGreaterThan(150);
  }, 60_000);

  it('no replica ready, one of them taking deliveries: every delivery reaches it', async () => {
    const [s1, s2, s3] = replicas;
    await s1.set('unready');
    await s2.set('stopped');
    await s3.set('stopped');
    // The test bit: HAProxy's readiness-checked backend has no server UP.
    await outOfRotation(lb, ['s1', 's2', 's3']);
    const statuses = await load(lb);
    expect(notOk(statuses)).toEqual({ notOk: 0, statuses: [] });
    expect(s1.answered(200)).toBeGreaterThanOrEqual(statuses.length);
    await outOfRotation(lb, ['s1', 's2', 's3']);
  }, 60_000);
});
