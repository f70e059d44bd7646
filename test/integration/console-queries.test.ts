import { join } from 'node:path';
import { consoleAverbacoes } from '../../src/store/console-averbacoes';
import { consoleEvents } from '../../src/store/console-events';
import { deliveryRollup } from '../../src/store/console-rollup';
import { consoleSessionsRepo } from '../../src/store/console-sessions';
import type { NewEvent } from '../../src/store/events';
import { openStore, type Store } from '../../src/store/store';
import { tempDir } from '../helpers/tmp';

/**
 * The console's statements on a real SQLite file: the deliveries rollup counts each row once and
 * only what is new, event listings page by keyset with bounded windows, the time range and the
 * JSON match select what they say, sessions expire.
 */

let tmp: ReturnType<typeof tempDir>;
let store: Store;
beforeEach(() => {
  tmp = tempDir();
  store = openStore(join(tmp.dir, 'consig.db'), { migrate: true });
});
afterEach(() => {
  store.close();
  tmp.cleanup();
});

const T0 = Date.parse('2026-11-21T10:00:00.000Z');
const at = (minutes: number) => new Date(T0 + minutes * 60_000).toISOString();

function addDelivery(
  receivedAt: string,
  outcome: 'accepted' | 'duplicate' | 'invalid_signature' = 'accepted',
) {
  store.deliveries.insert({
    receivedAt,
    path: '/webhooks',
    outcome,
    httpStatus: outcome === 'invalid_signature' ? 401 : 200,
    dedupKey: null,
    eventId: null,
    durationMs: 1,
    bodyBytes: 10,
    secretIndex: null,
    remoteAddr: null,
    detail: null,
  });
}

let seq = 0;
function addEvent(o: Partial<NewEvent> & { minutes?: number } = {}): number {
  seq += 1;
  const body = o.body ?? JSON.stringify({ evento: o.evento ?? 'proposta.criada', dados: { n: seq } });
  return store.events.insertOrCountDuplicate({
    dedupKey: `k-${seq}`,
    webhookId: `k-${seq}`,
    kind: 'event',
    evento: 'proposta.criada',
    nuProposta: 1,
    requestId: null,
    registryStatus: null,
    tentativa: 1,
    receivedAt: at(o.minutes ?? seq),
    bodyBytes: Buffer.byteLength(body),
    status: 'done',
    lastError: null,
    ...o,
    body,
  }).id;
}

describe('deliveries rollup', () => {
  it('counts each delivery once, by UTC hour and outcome, and only the new ones at each call', () => {
    const rollup = deliveryRollup(store.db);
    addDelivery(at(1));
    addDelivery(at(2), 'duplicate');
    addDelivery(at(61), 'invalid_signature');
    const now = new Date(T0 + 2 * 3_600_000);
    expect(rollup.update(now)).toEqual({ behind: 0, locked: false });
    expect(rollup.since('2026-11-21T00')).toEqual([
      { hour: '2026-11-21T10', outcome: 'accepted', n: 1 },
      { hour: '2026-11-21T10', outcome: 'duplicate', n: 1 },
      { hour: '2026-11-21T11', outcome: 'invalid_signature', n: 1 },
    ]);
    expect(rollup.update(now)).toEqual({ behind: 0, locked: false });
    addDelivery(at(3));
    rollup.update(now);
    expect(rollup.since('2026-11-21T10').find((h) => h.outcome === 'accepted')?.n).toBe(2);
    const total = (store.db.prepare('SELECT sum(n) AS n FROM console_delivery_hours').get() as { n: number })
      .n;
    expect(total).toBe(4);
  });

  it('starts at the first delivery of the last 8 days on its first run', () => {
    addDelivery(at(-20 * 24 * 60));
    addDelivery(at(1));
    deliveryRollup(store.db).update(new Date(T0 + 3_600_000));
    expect(deliveryRollup(store.db).since('2000-01-01T00')).toEqual([
      { hour: '2026-11-21T10', outcome: 'accepted', n: 1 },
    ]);
  });
});

describe('event listings', () => {
  it('pages by keyset: disjoint pages, newest first, every row once', () => {
    const ids = Array.from({ length: 25 }, () => addEvent());
    const q = consoleEvents(store.db);
    const seen: number[] = [];
    let before: number | undefined;
    for (;;) {
      const page = q.list({ limit: 10, before });
      seen.push(...page.rows.map((r) => r.id));
      if (page.next === null) break;
      before = page.next;
    }
    expect(seen).toEqual([...ids].reverse());
  });

  it('searches a filter without an index in windows, says where it stopped, and goes on from there', () => {
    const rare = addEvent({ evento: 'pagamento.falha' });
    for (let i = 0; i < 250; i++) addEvent();
    const q = consoleEvents(store.db);
    const first = q.list({ evento: 'pagamento.falha', scanCap: 100 });
    expect(first.rows).toEqual([]);
    expect(first.stoppedAt).not.toBeNull();
    const visited: number[] = [];
    let page = first;
    while (page.next !== null && visited.length < 10) {
      visited.push(page.next);
      page = q.list({ evento: 'pagamento.falha', scanCap: 100, before: page.next });
      if (page.rows.length > 0) break;
    }
    expect(page.rows.map((r) => r.id)).toEqual([rare]);
    expect(visited.length).toBe(2);
    expect(page.stoppedAt).toBeNull();
  });

  it('filters by a time range through the id order, exactly', () => {
    const ids = Array.from({ length: 30 }, (_, i) => addEvent({ minutes: i * 10 }));
    const q = consoleEvents(store.db);
    const page = q.list({ from: at(50), to: at(100) });
    expect(page.rows.map((r) => r.id)).toEqual(ids.slice(5, 10).reverse());
    expect(q.list({ from: at(10_000) }).rows).toEqual([]);
    expect(q.list({ to: at(-1) }).rows).toEqual([]);
  });

  it('matches JSON leaves by type, and never fails on a body that is not JSON text', () => {
    const a = addEvent({
      body: JSON.stringify({ dados: { no_conveniada: 'ACME', n: 5, ok: true, x: null } }),
    });
    addEvent({ body: JSON.stringify({ dados: { no_conveniada: 'ACME', n: '5', ok: false } }) });
    addEvent({ body: 'not json' });
    addEvent({ body: Buffer.from([0xff, 0xfe, 0x00]) });
    addEvent({ body: JSON.stringify([1, 2]) });
    const q = consoleEvents(store.db);
    // The keys of a leaf (PostgreSQL's path) from its SQLite path: `$."dados"."n"` → dados, n.
    const leaves = (json: { path: string; value: string | number | boolean | null }[]) =>
      json.map((l) => ({ ...l, keys: [...l.path.matchAll(/"([^"]*)"/g)].map((m) => m[1] as string) }));
    const ids = (json: { path: string; value: string | number | boolean | null }[]) =>
      q.list({ json: leaves(json) }).rows.map((r) => r.id);
    expect(ids([{ path: '$."dados"."n"', value: 5 }])).toEqual([a]);
    expect(ids([{ path: '$."dados"."ok"', value: true }])).toEqual([a]);
    expect(ids([{ path: '$."dados"."x"', value: null }])).toEqual([a]);
    expect(ids([{ path: '$."dados"."no_conveniada"', value: 'ACME' }]).length).toBe(2);
    expect(
      q.countMatching({
        status: 'done',
        json: leaves([{ path: '$."dados"."no_conveniada"', value: 'ACME' }]),
      }),
    ).toBe(2);
  });
});

describe('sessions and averbações', () => {
  it('reads a session only until it expires, and prunes expired ones', () => {
    const sessions = consoleSessionsRepo(store.db);
    sessions.create({ idHash: 'h1', role: 'viewer', now: at(0), expiresAt: at(60), tokenFp: 'fp-v' });
    expect(sessions.live('h1', at(59))?.role).toBe('viewer');
    expect(sessions.live('h1', at(60))).toBeUndefined();
    expect(sessions.pruneExpired(at(61))).toBe(1);
  });

  it("ends the sessions whose token is not their role's configured one, or all of them", () => {
    const sessions = consoleSessionsRepo(store.db);
    const open = (idHash: string, role: 'admin' | 'viewer', tokenFp: string) =>
      sessions.create({ idHash, role, now: at(0), expiresAt: at(60), tokenFp });
    open('a-old', 'admin', 'fp-a1');
    open('a-new', 'admin', 'fp-a2');
    open('v', 'viewer', 'fp-v');
    // A viewer session carrying the admin token's fingerprint is not the viewer token's.
    open('v-odd', 'viewer', 'fp-a2');
    store.db
      .prepare(
        `INSERT INTO console_sessions (id_hash, role, created_at, expires_at, last_seen)
      VALUES ('pre-0011', 'admin', ?, ?, ?)`,
      )
      .run(at(0), at(60), at(0));
    expect(sessions.endOthers({ admin: 'fp-a2', viewer: 'fp-v' })).toBe(3);
    expect(sessions.live('a-new', at(1))?.token_fp).toBe('fp-a2');
    expect(sessions.live('v', at(1))?.role).toBe('viewer');
    // The viewer token removed: its sessions end.
    expect(sessions.endOthers({ admin: 'fp-a2', viewer: null })).toBe(1);
    expect(sessions.endAll()).toBe(1);
    expect(sessions.live('a-new', at(1))).toBeUndefined();
  });

  it('lists averbações newest first by keyset', () => {
    for (let i = 0; i < 5; i++) {
      store.averbacoes.track({
        requestId: `req-${i}`,
        correlationId: null,
        nuProposta: i,
        status: 'queued',
        via: 'declared',
        now: at(i),
        nextPollAt: at(i + 1),
      });
    }
    const q = consoleAverbacoes(store.db);
    const first = q.list({ limit: 3 });
    expect(first.rows.map((r) => r.request_id)).toEqual(['req-4', 'req-3', 'req-2']);
    const second = q.list({ limit: 3, before: first.next ?? undefined });
    expect(second.rows.map((r) => r.request_id)).toEqual(['req-1', 'req-0']);
    expect(second.next).toBeNull();
    expect(q.list({ waiting: true }).rows.length).toBe(5);
    expect(q.list({ status: 'completed' }).rows).toEqual([]);
  });
});
