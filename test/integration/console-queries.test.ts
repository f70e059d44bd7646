import { join } from 'node:path';
import { rollupHours, updateRollup } from '../../src/core/console-overview';
import { adminStore, type ConsoleStore, consoleStore } from '../../src/core/store-port';
import { sqliteStorePort } from '../../src/sqlite/sqlite-port';
import type { NewEvent } from '../../src/domain/event-status';
import { sqliteStoreSql } from '../../src/sqlite/sqlite-statements';
import { openStore, type Store } from '../../src/sqlite/store';
import { tempDir } from '../helpers/tmp';

/**
 * The console's statements (src/core/console-*.ts) on a real SQLite file: the deliveries rollup counts each row once and
 * only what is new, event listings page by keyset with bounded windows, the time range and the
 * JSON match select what they say, sessions expire.
 */

let tmp: ReturnType<typeof tempDir>;
let store: Store;
let log: ConsoleStore;
beforeEach(() => {
  tmp = tempDir();
  store = openStore(join(tmp.dir, 'consig.db'), { migrate: true });
  log = consoleStore(sqliteStorePort(store));
});
afterEach(() => {
  store.close();
  tmp.cleanup();
});

const T0 = Date.parse('2026-11-21T10:00:00.000Z');
const at = (minutes: number) => new Date(T0 + minutes * 60_000).toISOString();

/** The hourly rollup's update and its hours from `sinceHour` on. */
function deliveryRollup() {
  const sql = sqliteStoreSql(store.db);
  return {
    update: (now: Date) => updateRollup(sql, now),
    since: (sinceHour: string) => sql.read((q) => rollupHours(q, sinceHour)),
  };
}

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
  it('counts each delivery once, by UTC hour and outcome, and only the new ones at each call', async () => {
    const rollup = deliveryRollup();
    addDelivery(at(1));
    addDelivery(at(2), 'duplicate');
    addDelivery(at(61), 'invalid_signature');
    const now = new Date(T0 + 2 * 3_600_000);
    expect(await rollup.update(now)).toEqual({ behind: 0, locked: false });
    expect(await rollup.since('2026-11-21T00')).toEqual([
      { hour: '2026-11-21T10', outcome: 'accepted', n: 1 },
      { hour: '2026-11-21T10', outcome: 'duplicate', n: 1 },
      { hour: '2026-11-21T11', outcome: 'invalid_signature', n: 1 },
    ]);
    expect(await rollup.update(now)).toEqual({ behind: 0, locked: false });
    addDelivery(at(3));
    await rollup.update(now);
    expect((await rollup.since('2026-11-21T10')).find((h) => h.outcome === 'accepted')?.n).toBe(2);
    const total = (store.db.prepare('SELECT sum(n) AS n FROM console_delivery_hours').get() as { n: number })
      .n;
    expect(total).toBe(4);
  });

  it('starts at the first delivery of the last 8 days on its first run', async () => {
    addDelivery(at(-20 * 24 * 60));
    addDelivery(at(1));
    await deliveryRollup().update(new Date(T0 + 3_600_000));
    expect(await deliveryRollup().since('2000-01-01T00')).toEqual([
      { hour: '2026-11-21T10', outcome: 'accepted', n: 1 },
    ]);
  });
});

describe('event listings', () => {
  it('pages by keyset: disjoint pages, newest first, every row once', async () => {
    const ids = Array.from({ length: 25 }, () => addEvent());
    const seen: number[] = [];
    let before: number | undefined;
    for (;;) {
      const page = await log.events({ limit: 10, before });
      seen.push(...page.rows.map((r) => r.id));
      if (page.next === null) break;
      before = page.next;
    }
    expect(seen).toEqual([...ids].reverse());
  });

  it('searches a filter without an index in windows, says where it stopped, and goes on from there', async () => {
    const rare = addEvent({ evento: 'pagamento.falha' });
    for (let i = 0; i < 250; i++) addEvent();
    const first = await log.events({ evento: 'pagamento.falha', scanCap: 100 });
    expect(first.rows).toEqual([]);
    expect(first.stoppedAt).not.toBeNull();
    const visited: number[] = [];
    let page = first;
    while (page.next !== null && visited.length < 10) {
      visited.push(page.next);
      page = await log.events({ evento: 'pagamento.falha', scanCap: 100, before: page.next });
      if (page.rows.length > 0) break;
    }
    expect(page.rows.map((r) => r.id)).toEqual([rare]);
    expect(visited.length).toBe(2);
    expect(page.stoppedAt).toBeNull();
  });

  it('filters by a time range through the id order, exactly', async () => {
    const ids = Array.from({ length: 30 }, (_, i) => addEvent({ minutes: i * 10 }));
    const page = await log.events({ from: at(50), to: at(100) });
    expect(page.rows.map((r) => r.id)).toEqual(ids.slice(5, 10).reverse());
    expect((await log.events({ from: at(10_000) })).rows).toEqual([]);
    expect((await log.events({ to: at(-1) })).rows).toEqual([]);
  });

  it('matches JSON leaves by type, and never fails on a body that is not JSON text', async () => {
    const a = addEvent({
      body: JSON.stringify({ dados: { no_conveniada: 'ACME', n: 5, ok: true, x: null } }),
    });
    addEvent({ body: JSON.stringify({ dados: { no_conveniada: 'ACME', n: '5', ok: false } }) });
    addEvent({ body: 'not json' });
    addEvent({ body: Buffer.from([0xff, 0xfe, 0x00]) });
    addEvent({ body: JSON.stringify([1, 2]) });
    // The keys of a leaf (PostgreSQL's path) from its SQLite path: `$."dados"."n"` → dados, n.
    const leaves = (json: { path: string; value: string | number | boolean | null }[]) =>
      json.map((l) => ({ ...l, keys: [...l.path.matchAll(/"([^"]*)"/g)].map((m) => m[1] as string) }));
    const ids = async (json: { path: string; value: string | number | boolean | null }[]) =>
      (await log.events({ json: leaves(json) })).rows.map((r) => r.id);
    expect(await ids([{ path: '$."dados"."n"', value: 5 }])).toEqual([a]);
    expect(await ids([{ path: '$."dados"."ok"', value: true }])).toEqual([a]);
    expect(await ids([{ path: '$."dados"."x"', value: null }])).toEqual([a]);
    expect((await ids([{ path: '$."dados"."no_conveniada"', value: 'ACME' }])).length).toBe(2);
    expect(
      await log.countEvents({
        status: 'done',
        json: leaves([{ path: '$."dados"."no_conveniada"', value: 'ACME' }]),
      }),
    ).toBe(2);
  });
});

describe('sessions and averbações', () => {
  it('reads a session only until it expires, and prunes expired ones', async () => {
    const { sessions } = log;
    await sessions.create({ idHash: 'h1', role: 'viewer', now: at(0), expiresAt: at(60), tokenFp: 'fp-v' });
    expect((await sessions.live('h1', at(59)))?.role).toBe('viewer');
    expect(await sessions.live('h1', at(60))).toBeUndefined();
    expect(await sessions.pruneExpired(at(61))).toBe(1);
  });

  it("ends the sessions whose token is not their role's configured one, or all of them", async () => {
    const { sessions } = log;
    const open = (idHash: string, role: 'admin' | 'viewer', tokenFp: string) =>
      sessions.create({ idHash, role, now: at(0), expiresAt: at(60), tokenFp });
    await open('a-old', 'admin', 'fp-a1');
    await open('a-new', 'admin', 'fp-a2');
    await open('v', 'viewer', 'fp-v');
    // A viewer session carrying the admin token's fingerprint is not the viewer token's.
    await open('v-odd', 'viewer', 'fp-a2');
    store.db
      .prepare(
        `INSERT INTO console_sessions (id_hash, role, created_at, expires_at, last_seen)
      VALUES ('pre-0011', 'admin', ?, ?, ?)`,
      )
      .run(at(0), at(60), at(0));
    expect(await sessions.endOthers({ admin: 'fp-a2', viewer: 'fp-v' })).toBe(3);
    expect((await sessions.live('a-new', at(1)))?.token_fp).toBe('fp-a2');
    expect((await sessions.live('v', at(1)))?.role).toBe('viewer');
    // The viewer token removed: its sessions end.
    expect(await sessions.endOthers({ admin: 'fp-a2', viewer: null })).toBe(1);
    expect(await sessions.endAll()).toBe(1);
    expect(await sessions.live('a-new', at(1))).toBeUndefined();
  });

  it('lists averbações newest first by keyset', async () => {
    const admin = adminStore(sqliteStorePort(store));
    for (let i = 0; i < 5; i++) {
      const t = { requestId: `req-${i}`, correlationId: null, nuProposta: i, via: 'declared' } as const;
      await admin.track(t, new Date(at(i)), 60_000);
    }
    const first = await log.averbacoes({ limit: 3 });
    expect(first.rows.map((r) => r.request_id)).toEqual(['req-4', 'req-3', 'req-2']);
    const second = await log.averbacoes({ limit: 3, before: first.next ?? undefined });
    expect(second.rows.map((r) => r.request_id)).toEqual(['req-1', 'req-0']);
    expect(second.next).toBeNull();
    expect((await log.averbacoes({ waiting: true })).rows.length).toBe(5);
    expect((await log.averbacoes({ status: 'completed' })).rows).toEqual([]);
  });
});
