import { join } from 'node:path';
import { pgAdminLog } from '../../src/cluster/pg-admin-log';
import { pgConsoleLog } from '../../src/cluster/pg-console-log';
import { migratePostgres } from '../../src/cluster/pg-migrate';
import {
  type ConsoleRole,
  type NewRefusal,
  type OverviewQuery,
  REFUSAL_ROWS_PER_WINDOW,
  tokenFingerprint,
} from '../../src/domain/console';
import { type ConsoleLog, sqliteConsoleLog } from '../../src/http/console/console-log';
import { openStore, type Store } from '../../src/store/store';
import { pgBed } from '../helpers/cluster-bed';
import { tempDir } from '../helpers/tmp';

/**
 * The console's store, one behaviour table run against each adapter of ConsoleLog (Hookdeck
 * Outpost's `drivertest`): the SQLite file (http/console/console-log.ts sqliteConsoleLog, as
 * main.ts builds it) and PostgreSQL (cluster/pg-console-log.ts, as a replica builds it on its
 * pool), each on a fresh, migrated store. A behaviour is written once, below, against the
 * ConsoleLog port; an adapter that answers differently fails its row. To add a behaviour: one
 * `behaviour(name, fn)` inside the `describe.each`, using only `store.log` and the raw writes of
 * {@link Opened} (when it needs rows the port cannot write, add one there, for both stores). An
 * adapter found wrong and not fixed yet names the behaviour in its `knownWrong`.
 */

interface NewAverbacao {
  requestId: string;
  nu: number;
  status: 'queued' | 'processing' | 'completed' | 'error';
  stale: boolean;
  /** Waiting for a poll: next_poll_at set. */
  waiting: boolean;
}

/** One adapter on a fresh store, and the one raw write the port has no method for. */
interface Opened {
  log: ConsoleLog;
  /** A delivery as the ingest (SQLite) or the relay (PostgreSQL) writes it: the rollup's input. */
  addDelivery(receivedAt: string, outcome: string): Promise<void>;
  /** An averbação as tracking writes it (store/averbacoes.ts, pg-track.ts). */
  addAverbacao(a: NewAverbacao): Promise<void>;
  close(): Promise<void>;
}

const pg = pgBed({ prefix: 'console_conf' });

/**
 * An adapter, and the behaviours it is known to get wrong: each runs as `it.failing`, so the suite
 * says so, and fails once the adapter is fixed (take the name out then).
 */
interface Adapter {
  name: string;
  open(): Promise<Opened>;
  knownWrong?: readonly string[];
}

const ADAPTERS: Adapter[] = [
  {
    name: 'SQLite',
    open: async () => {
      const dir = tempDir('consig-conformance-');
      const store: Store = openStore(join(dir.dir, 'consig.db'), { migrate: true });
      const insert = store.db.prepare<[string, string]>(
        `INSERT INTO deliveries (received_at, path, outcome, http_status, duration_ms) VALUES (?, '/webhooks', ?, 200, 1)`,
      );
      const track = store.db.prepare<[string, number, string, number, string | null]>(
        `INSERT INTO averbacoes (request_id, nu_proposta, status, tracked_via, stale, next_poll_at, created_at, updated_at)
         VALUES (?, ?, ?, 'started', ?, ?, '${T0}', '${T0}')`,
      );
      return {
        log: sqliteConsoleLog(store, { sweep: () => undefined, nudge: () => undefined }),
        addDelivery: async (at, outcome) => {
          insert.run(at, outcome);
        },
        addAverbacao: async (a) => {
          track.run(a.requestId, a.nu, a.status, a.stale ? 1 : 0, a.waiting ? T0 : null);
        },
        close: async () => {
          store.close();
          dir.cleanup();
        },
      };
    },
  },
  {
    name: 'PostgreSQL',
    open: async () => {
      await migratePostgres(pg.pool);
      const admin = pgAdminLog({
        pool: pg.pool,
        running: () => true,
        kick: async () => undefined,
        schedulePoll: async () => undefined,
      });
      let spoolId = 0;
      return {
        log: pgConsoleLog(admin),
        addDelivery: async (at, outcome) => {
          await pg.pool.query(
            `INSERT INTO deliveries (replica, spool_id, received_at, path, outcome, http_status, duration_ms)
             VALUES ('r1', $1, $2::timestamptz, '/webhooks', $3, 200, 1)`,
            [++spoolId, at, outcome],
          );
        },
        addAverbacao: async (a) => {
          await pg.pool.query(
            `INSERT INTO averbacoes (request_id, nu_proposta, status, tracked_via, stale, next_poll_at, created_at, updated_at)
             VALUES ($1, $2, $3, 'started', $4, $5::timestamptz, '${T0}', '${T0}')`,
            [a.requestId, String(a.nu), a.status, a.stale, a.waiting ? T0 : null],
          );
        },
        close: async () => undefined, // pgBed drops the pool after each test
      };
    },
  },
];

const T0 = '2026-11-21T13:00:00.000Z';
const at = (ms: number): string => new Date(Date.parse(T0) + ms).toISOString();
const MINUTE = 60_000;
const HOUR = 3_600_000;
const QUERY: OverviewQuery = { silenceMs: HOUR, stuckCutoffs: [], destinations: [] };

const ADMIN_FP = tokenFingerprint('admin-token-0123456789');
const VIEWER_FP = tokenFingerprint('viewer-token-0123456789');
const ROTATED_FP = tokenFingerprint('admin-token-rotated-0123456789');

const session = (idHash: string, role: ConsoleRole = 'admin', tokenFp = ADMIN_FP, ttlMs = HOUR) => ({
  idHash,
  role,
  now: T0,
  expiresAt: at(ttlMs),
  tokenFp,
});

const refusal = (over: Partial<NewRefusal> = {}): NewRefusal => ({
  at: at(MINUTE),
  role: 'viewer',
  session: 'abcd1234',
  route: 'POST /console/events/12/replay',
  reason: 'role',
  ip: '10.0.0.7',
  ...over,
});

describe.each(ADAPTERS)('the console store on $name', (adapter) => {
  const behaviour = (name: string, fn: () => Promise<void>) =>
    (adapter.knownWrong?.includes(name) ? it.failing : it)(name, fn);
  let store: Opened;
  let log: ConsoleLog;
  beforeEach(async () => {
    store = await adapter.open();
    log = store.log;
  });
  afterEach(async () => {
    await store.close();
  });

  describe('sessions', () => {
    behaviour('reads back a created session, in the SQLite log shape', async () => {
      await log.sessions.create(session('h1', 'viewer', VIEWER_FP));
      expect(await log.sessions.live('h1', at(MINUTE))).toEqual({
        id_hash: 'h1',
        role: 'viewer',
        created_at: T0,
        expires_at: at(HOUR),
        last_seen: T0,
        token_fp: VIEWER_FP,
      });
      expect(await log.sessions.live('unknown', at(MINUTE))).toBeUndefined();
    });

    behaviour('is live until its expiry, not at it (touching does not extend it)', async () => {
      await log.sessions.create(session('h1'));
      await log.sessions.touch('h1', at(HOUR - 1));
      expect((await log.sessions.live('h1', at(HOUR - 1)))?.last_seen).toBe(at(HOUR - 1));
      expect(await log.sessions.live('h1', at(HOUR))).toBeUndefined();
    });

    behaviour('prunes the sessions expired at now, and counts them', async () => {
      await log.sessions.create(session('short', 'admin', ADMIN_FP, MINUTE));
      await log.sessions.create(session('long'));
      expect(await log.sessions.pruneExpired(at(MINUTE - 1))).toBe(0);
      expect(await log.sessions.pruneExpired(at(MINUTE))).toBe(1);
      expect(await log.sessions.live('long', at(MINUTE))).toBeDefined();
    });

    behaviour('ends one session, and every session', async () => {
      for (const h of ['a', 'b', 'c']) await log.sessions.create(session(h));
      await log.sessions.remove('a');
      expect(await log.sessions.live('a', at(1))).toBeUndefined();
      expect(await log.sessions.live('b', at(1))).toBeDefined();
      expect(await log.sessions.endAll()).toBe(2);
      expect(await log.sessions.endAll()).toBe(0);
      expect(await log.sessions.live('b', at(1))).toBeUndefined();
    });

    behaviour('ends the sessions of a rotated or removed token, and only those', async () => {
      await log.sessions.create(session('admin-old', 'admin', ADMIN_FP));
      await log.sessions.create(session('viewer', 'viewer', VIEWER_FP));
      // A viewer session opened by the admin's token's fingerprint is not the viewer's token.
      await log.sessions.create(session('crossed', 'viewer', ADMIN_FP));
      expect(await log.sessions.endOthers({ admin: ROTATED_FP, viewer: VIEWER_FP })).toBe(2);
      expect(await log.sessions.live('viewer', at(1))).toBeDefined();
      expect(await log.sessions.live('admin-old', at(1))).toBeUndefined();
      // The viewer token removed: its sessions end too.
      expect(await log.sessions.endOthers({ admin: ROTATED_FP, viewer: null })).toBe(1);
      expect(await log.sessions.live('viewer', at(1))).toBeUndefined();
    });
  });

  describe('the sign-in throttle', () => {
    const WINDOW = 15 * MINUTE;
    const failAt = (address: string, ms: number) =>
      log.signInFailures.failed(address, at(ms), at(ms - WINDOW));

    behaviour('counts wrong tokens per address, in the window that began with the first', async () => {
      await failAt('10.0.0.1', 0);
      await failAt('10.0.0.1', MINUTE);
      await failAt('10.0.0.2', MINUTE);
      expect(await log.signInFailures.current('10.0.0.1', at(MINUTE - WINDOW))).toEqual({
        since: T0,
        failures: 2,
      });
      expect(await log.signInFailures.current('10.0.0.2', at(MINUTE - WINDOW))).toEqual({
        since: at(MINUTE),
        failures: 1,
      });
      expect(await log.signInFailures.current('10.0.0.3', at(MINUTE - WINDOW))).toBeUndefined();
    });

    behaviour('forgets a window once it is over, and a failure after it begins a new one', async () => {
      await failAt('10.0.0.1', 0);
      await failAt('10.0.0.1', MINUTE);
      expect(await log.signInFailures.current('10.0.0.1', at(0))).toBeUndefined();
      await failAt('10.0.0.1', WINDOW);
      expect(await log.signInFailures.current('10.0.0.1', at(0))).toEqual({ since: at(WINDOW), failures: 1 });
    });

    behaviour('starts again after a success', async () => {
      await failAt('10.0.0.1', 0);
      await failAt('10.0.0.2', 0);
      await log.signInFailures.succeeded('10.0.0.1');
      expect(await log.signInFailures.current('10.0.0.1', at(-WINDOW))).toBeUndefined();
      expect((await log.signInFailures.current('10.0.0.2', at(-WINDOW)))?.failures).toBe(1);
    });
  });

  describe('the audit', () => {
    const page = () => log.audit.page(Number.MAX_SAFE_INTEGER, 100);

    behaviour('records actions, newest first, with any CPF in the detail masked', async () => {
      await log.audit.record({
        at: T0,
        role: 'admin',
        session: 'abcd1234',
        action: 'replay_bulk',
        target: '/console/events',
        detail: { filter: { cpf: '12345678909' }, count: 3 },
        ip: '10.0.0.7',
      });
      await log.audit.record({
        at: at(MINUTE),
        role: null,
        session: null,
        action: 'sign_in_failed',
        target: null,
        detail: null,
        ip: null,
      });
      const rows = await page();
      expect(rows.map((r) => r.action)).toEqual(['sign_in_failed', 'replay_bulk']);
      expect(rows[1]).toEqual({
        id: rows[0]!.id - 1,
        at: T0,
        role: 'admin',
        session: 'abcd1234',
        action: 'replay_bulk',
        target: '/console/events',
        detail: expect.not.stringContaining('12345678909'),
        ip: '10.0.0.7',
        outcome: null,
        reason: null,
        times: 1,
        last_at: null,
      });
    });

    behaviour('pages by id: below `beforeId`, at most `limit`', async () => {
      for (let i = 0; i < 5; i++)
        await log.audit.record({
          at: at(i * MINUTE),
          role: 'admin',
          session: null,
          action: 'sign_in',
          target: `t${i}`,
          detail: null,
          ip: null,
        });
      const first = await log.audit.page(Number.MAX_SAFE_INTEGER, 2);
      expect(first.map((r) => r.target)).toEqual(['t4', 't3']);
      const next = await log.audit.page(first[1]!.id, 2);
      expect(next.map((r) => r.target)).toEqual(['t2', 't1']);
      expect((await log.audit.page(next[1]!.id, 2)).map((r) => r.target)).toEqual(['t0']);
    });

    behaviour('adds a repeated refusal to one row in its hour: times and last_at', async () => {
      await log.audit.refuse(refusal());
      await log.audit.refuse(refusal({ at: at(2 * MINUTE) }));
      await log.audit.refuse(refusal({ at: at(3 * MINUTE), ip: null }));
      await log.audit.refuse(refusal({ at: at(4 * MINUTE), ip: null }));
      await log.audit.refuse(refusal({ at: at(HOUR + MINUTE) })); // the next window
      const rows = await page();
      expect(rows.map((r) => [r.at, r.ip, r.times, r.last_at])).toEqual([
        [at(HOUR + MINUTE), '10.0.0.7', 1, null],
        [at(3 * MINUTE), null, 2, at(4 * MINUTE)],
        [at(MINUTE), '10.0.0.7', 2, at(2 * MINUTE)],
      ]);
      expect(rows[2]).toMatchObject({
        role: 'viewer',
        session: 'abcd1234',
        action: 'refused',
        target: 'POST /console/events/12/replay',
        outcome: 'refused',
        reason: 'role',
        detail: null,
      });
    });

    behaviour('past the window cap, counts the rest in one overflow row per reason', async () => {
      for (let i = 0; i < REFUSAL_ROWS_PER_WINDOW; i++)
        await log.audit.refuse(refusal({ ip: `10.1.${i >> 8}.${i & 255}` }));
      await log.audit.refuse(refusal({ ip: '10.9.9.1' }));
      await log.audit.refuse(refusal({ ip: '10.9.9.2', reason: 'csrf' }));
      await log.audit.refuse(refusal({ ip: '10.9.9.3', at: at(5 * MINUTE) }));
      const rows = await log.audit.page(Number.MAX_SAFE_INTEGER, 3);
      expect(rows.map((r) => [r.target, r.ip, r.session, r.role, r.reason, r.times, r.last_at])).toEqual([
        ['*', null, null, null, 'csrf', 1, null],
        ['*', null, null, null, 'role', 2, at(5 * MINUTE)],
        ['POST /console/events/12/replay', `10.1.0.199`, 'abcd1234', 'viewer', 'role', 1, null],
      ]);
    });
  });

  describe('the deliveries page', () => {
    behaviour('lists every delivery received in the time range, whatever order the ids took', async () => {
      // Stored in another order than received: a slow request's row comes after a quicker one's.
      await store.addDelivery(at(3 * MINUTE), 'accepted');
      await store.addDelivery(at(MINUTE), 'duplicate');
      await store.addDelivery(at(5 * MINUTE), 'invalid_signature');
      await store.addDelivery(at(2 * MINUTE), 'accepted');
      await store.addDelivery(at(4 * MINUTE), 'accepted');
      const listed = async (f: { from?: string; to?: string; outcome?: string }) =>
        (await log.deliveries(f)).rows.map((r) => r.received_at).sort();
      expect(await listed({ from: at(2 * MINUTE), to: at(4 * MINUTE) })).toEqual([
        at(2 * MINUTE),
        at(3 * MINUTE),
      ]);
      expect(await listed({ from: at(MINUTE), outcome: 'accepted' })).toEqual([
        at(2 * MINUTE),
        at(3 * MINUTE),
        at(4 * MINUTE),
      ]);
      expect(await listed({ to: at(3 * MINUTE) })).toEqual([at(MINUTE), at(2 * MINUTE)]);
      // Newest received first, and the next page goes on from the last row (keyset).
      const first = await log.deliveries({ from: at(MINUTE), limit: 2 });
      expect(first.rows.map((r) => r.received_at)).toEqual([at(5 * MINUTE), at(4 * MINUTE)]);
      const next = await log.deliveries({ from: at(MINUTE), limit: 2, before: first.next! });
      expect(next.rows.map((r) => r.received_at)).toEqual([at(3 * MINUTE), at(2 * MINUTE)]);
    });
  });

  describe('the averbações page', () => {
    beforeEach(async () => {
      const rows: [string, NewAverbacao['status'], boolean, boolean][] = [
        ['r1', 'completed', false, false],
        ['r2', 'queued', false, true],
        ['r3', 'queued', true, false],
        ['r4', 'processing', true, true],
        ['r5', 'error', false, false],
      ];
      for (const [requestId, status, stale, waiting] of rows)
        await store.addAverbacao({ requestId, nu: 7, status, stale, waiting });
    });
    const ids = async (f: Parameters<ConsoleLog['averbacoes']>[0]) => {
      const page = await log.averbacoes(f);
      return { ids: page.rows.map((r) => r.request_id), more: page.next !== null };
    };

    behaviour('lists newest tracked first, by pages, with the filters', async () => {
      expect(await ids({ limit: 2 })).toEqual({ ids: ['r5', 'r4'], more: true });
      const first = await log.averbacoes({ limit: 2 });
      expect(await ids({ limit: 2, before: first.next! })).toEqual({ ids: ['r3', 'r2'], more: true });
      expect(await ids({ limit: 3, before: first.next! })).toEqual({ ids: ['r3', 'r2', 'r1'], more: false });
      expect(await ids({ status: 'queued' })).toEqual({ ids: ['r3', 'r2'], more: false });
      expect(await ids({ stale: true })).toEqual({ ids: ['r4', 'r3'], more: false });
      expect(await ids({ waiting: true })).toEqual({ ids: ['r4', 'r2'], more: false });
      expect((await log.averbacoes({ limit: 1 })).rows[0]).toMatchObject({ nu_proposta: 7, status: 'error' });
    });

    behaviour('counts the waiting and the stale still waiting on the overview', async () => {
      expect((await log.overview(new Date(T0), QUERY)).averbacoes).toEqual({ waiting: 2, staleWaiting: 2 });
    });
  });

  describe("the overview's hourly rollup", () => {
    behaviour('counts deliveries per UTC hour and outcome, each once', async () => {
      await store.addDelivery(at(MINUTE), 'accepted');
      await store.addDelivery(at(2 * MINUTE), 'accepted');
      await store.addDelivery(at(3 * MINUTE), 'invalid_signature');
      await store.addDelivery(at(HOUR + MINUTE), 'accepted');
      const first = await log.overview(new Date(at(2 * HOUR)), QUERY);
      expect(first.rollup).toEqual({ behind: 0, locked: false });
      await store.addDelivery(at(HOUR + 2 * MINUTE), 'duplicate');
      const second = await log.overview(new Date(at(2 * HOUR)), QUERY);
      expect(second.hours).toEqual([
        { hour: '2026-11-21T13', outcome: 'accepted', n: 2 },
        { hour: '2026-11-21T13', outcome: 'invalid_signature', n: 1 },
        { hour: '2026-11-21T14', outcome: 'accepted', n: 1 },
        { hour: '2026-11-21T14', outcome: 'duplicate', n: 1 },
      ]);
      expect(second.lastDeliveryAt).toBe(at(HOUR + 2 * MINUTE));
    });

    behaviour(
      'counts, on its first update, every delivery of the window, whatever order the ids took',
      async () => {
        // Ids follow the commit, not the arrival: the request received first may be stored second.
        await store.addDelivery(at(2 * MINUTE), 'accepted');
        await store.addDelivery(at(MINUTE), 'duplicate');
        const figures = await log.overview(new Date(at(HOUR)), QUERY);
        expect(figures.hours).toEqual([
          { hour: '2026-11-21T13', outcome: 'accepted', n: 1 },
          { hour: '2026-11-21T13', outcome: 'duplicate', n: 1 },
        ]);
      },
    );

    behaviour('gives the same figures on an empty store', async () => {
      const { rollup, hours, lastDeliveryAt, inFlight, stuckByStatus, events, averbacoes } =
        await log.overview(new Date(T0), QUERY);
      expect({ rollup, hours, lastDeliveryAt, inFlight, stuckByStatus, events, averbacoes }).toEqual({
        rollup: { behind: 0, locked: false },
        hours: [],
        lastDeliveryAt: null,
        inFlight: null,
        stuckByStatus: {},
        events: { pending: 0, failed: 0, dead: 0, oldestUnprocessedAt: null },
        averbacoes: { waiting: 0, staleWaiting: 0 },
      });
    });
  });
});
