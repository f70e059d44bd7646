import { join } from 'node:path';
import { migratePostgres } from '../../src/cluster/pg-migrate';
import { OUTBOX_CHANNEL } from '../../src/cluster/pg-outbox';
import { type CommandLog, type CommandSession, withCommandLog } from '../../src/cli/command-log';
import { type Config, loadConfig } from '../../src/config';
import type { NewAuditEntry } from '../../src/domain/console';
import { openStore } from '../../src/store/store';
import { pgBed } from '../helpers/cluster-bed';
import { tempDir } from '../helpers/tmp';

/**
 * The log commands' port (cli/command-log.ts `CommandLog`), one behaviour table run against each
 * adapter (Hookdeck Outpost's `drivertest`): the SQLite file and PostgreSQL, each opened as the
 * commands open it — `withCommandLog` on a Config with DATABASE_PATH, or with DATABASE_URL — on a
 * fresh, migrated store. The behaviours are those of the methods only the commands have (stats,
 * proposal lists, replay, track on the command's connection, end-sessions, listen) and the name;
 * the admin API's shared reads are covered by the HTTP tests of both modes.
 */

/** One adapter on a fresh store, with the raw writes the port has no method for. */
interface Opened {
  config: Config;
  /** `sql` with `?` placeholders, on the store directly (not through the port). */
  exec(sql: string, params?: readonly unknown[]): Promise<void>;
  /** One value of a one-row query, as the driver gives it. */
  one(sql: string, params?: readonly unknown[]): Promise<unknown>;
  addDelivery(receivedAt: string, outcome: string, durationMs: number): Promise<void>;
  /** Sends the outbox's notification (PostgreSQL); null where the store has none. */
  notify: (() => Promise<void>) | null;
  expectedName: string;
  close(): Promise<void>;
}

const pg = pgBed({ prefix: 'command_conf' });

const ADAPTERS: { name: string; open(): Promise<Opened> }[] = [
  {
    name: 'SQLite',
    open: async () => {
      const dir = tempDir('consig-command-conf-');
      const path = join(dir.dir, 'consig.db');
      const store = openStore(path, { migrate: true });
      return {
        config: loadConfig({ DATABASE_PATH: path }),
        exec: async (sql, params = []) => {
          store.db.prepare(sql).run(...params);
        },
        one: async (sql, params = []) => Object.values(store.db.prepare(sql).get(...params) as object)[0],
        addDelivery: async (at, outcome, ms) => {
          store.db
            .prepare(
              `INSERT INTO deliveries (received_at, path, outcome, http_status, duration_ms) VALUES (?, '/webhooks', ?, 200, ?)`,
            )
            .run(at, outcome, ms);
        },
        notify: null,
        expectedName: path,
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
      const numbered = (sql: string) => {
        let n = 0;
        return sql.replace(/\?/g, () => `$${++n}`);
      };
      let spoolId = 0;
      const url = new URL(pg.url);
      return {
        config: loadConfig({ DATABASE_URL: pg.url }),
        exec: async (sql, params = []) => {
          await pg.pool.query(numbered(sql), [...params]);
        },
        one: async (sql, params = []) =>
          Object.values((await pg.pool.query(numbered(sql), [...params])).rows[0] as object)[0],
        addDelivery: async (at, outcome, ms) => {
          await pg.pool.query(
            `INSERT INTO deliveries (replica, spool_id, received_at, path, outcome, http_status, duration_ms)
             VALUES ('r1', $1, $2::timestamptz, '/webhooks', $3, 200, $4)`,
            [++spoolId, at, outcome, ms],
          );
        },
        notify: async () => {
          await pg.pool.query('SELECT pg_notify($1, $2)', [OUTBOX_CHANNEL, '']);
        },
        expectedName: `postgres://${url.hostname}:${url.port || 5432}${url.pathname}`,
        close: async () => undefined, // pgBed drops the pool after each test
      };
    },
  },
];

const T0 = '2026-11-21T13:00:00.000Z';
const at = (ms: number): string => new Date(Date.parse(T0) + ms).toISOString();
const MINUTE = 60_000;
const READ: CommandSession = { access: 'read' };
const WRITE: CommandSession = { access: 'write', command: 'conformance' };

describe.each(ADAPTERS)('the commands’ log on $name', (adapter) => {
  let store: Opened;
  const withLog = <T>(session: CommandSession, use: (log: CommandLog) => Promise<T>): Promise<T> =>
    withCommandLog(store.config, session, use);
  const addEvent = (id: number, nu: number, status: string, duplicates = 0) =>
    store.exec(
      `INSERT INTO events (id, dedup_key, kind, evento, nu_proposta, received_at, status, duplicates)
       VALUES (?, ?, 'event', 'proposta.criada', ?, ?, ?, ?)`,
      [id, `wh-${id}`, nu, at(id * MINUTE), status, duplicates],
    );
  const addProposal = (nu: number, status: string, updatedAt: string) =>
    store.exec(
      `INSERT INTO proposals (nu_proposta, stage, status, created_at, updated_at) VALUES (?, 'Proposta', ?, ?, ?)`,
      [nu, status, T0, updatedAt],
    );

  beforeEach(async () => {
    store = await adapter.open();
  });
  afterEach(async () => {
    await store.close();
  });

  it('names the log as the messages say it, never with a password', async () => {
    expect(await withLog(READ, async (log) => log.name)).toBe(store.expectedName);
  });

  it('gives the figures of stats, in the SQLite log shape', async () => {
    await addEvent(1, 7, 'done', 2);
    await addEvent(2, 7, 'done');
    await addEvent(3, 8, 'dead', 1);
    await addEvent(4, 9, 'pending');
    await store.addDelivery(at(MINUTE), 'accepted', 10);
    await store.addDelivery(at(2 * MINUTE), 'duplicate', 20);
    await store.addDelivery(at(3 * MINUTE), 'invalid_signature', 90);
    await addProposal(7, 'em_analise', T0);
    await addProposal(8, 'em_analise', at(10 * MINUTE));
    await addProposal(9, 'paga', T0);
    const cutoffs = [{ status: 'em_analise' as const, before: at(5 * MINUTE) }];
    const figures = await withLog(READ, (log) => log.stats(cutoffs, ['lender']));
    const { databaseBytes, replicas, ...rest } = figures;
    expect(databaseBytes).toBeGreaterThan(0);
    expect(rest).toEqual({
      eventsByStatus: { dead: 1, done: 2, pending: 1 },
      eventsByKind: { event: 4 },
      duplicatesTotal: 3,
      deliveriesByOutcome: { accepted: 1, duplicate: 1, invalid_signature: 1 },
      proposalsByStatus: { em_analise: 2, paga: 1 },
      proposalsStuckByStatus: { em_analise: 1 },
      // Over the answers the service waited for a commit only (not the refused signature).
      ackMs: { avg: 15, max: 20 },
      lastDeliveryAt: at(3 * MINUTE),
      forwarding: [{ destination: 'lender', pending: 0, dead: 0, oldest_pending_at: null, paused: 0 }],
    });
    // Who answered the deliveries: only the cluster has replicas.
    if (adapter.name === 'PostgreSQL')
      expect(replicas).toEqual([{ replica: 'r1', deliveries: 3, last_received_at: at(3 * MINUTE) }]);
    else expect(replicas).toBeUndefined();
  });

  it('lists proposals most recently changed first, and stuck ones longest first, up to the limit', async () => {
    await addProposal(1, 'em_analise', T0);
    await addProposal(2, 'em_analise', at(MINUTE));
    await addProposal(3, 'em_analise', at(2 * MINUTE));
    await addProposal(4, 'aprovada', at(3 * MINUTE));
    const [latest, stuck] = await withLog(READ, async (log) => [
      await log.latestProposals(['em_analise'], 2),
      await log.stuckProposals([{ status: 'em_analise', before: at(90_000) }], 10),
    ]);
    expect(latest.map((r) => [r.nu_proposta, r.status, r.updated_at])).toEqual([
      [3, 'em_analise', at(2 * MINUTE)],
      [2, 'em_analise', at(MINUTE)],
    ]);
    expect(stuck.map((r) => r.nu_proposta)).toEqual([1, 2]);
  });

  it('replays events all or nothing, by ids or by status', async () => {
    await addEvent(1, 7, 'dead');
    await addEvent(2, 7, 'done');
    await addEvent(3, 8, 'ignored');
    await addEvent(4, 9, 'dead');
    const now = at(60 * MINUTE);
    const refused = await withLog(WRITE, (log) => log.replay({ ids: [1, 3, 99] }, now));
    expect(refused).toEqual({ queued: [], unknown: [99], notReplayable: [{ id: 3, status: 'ignored' }] });
    expect(await store.one('SELECT status FROM events WHERE id = ?', [1])).toBe('dead');

    expect(await withLog(WRITE, (log) => log.replay({ ids: [2] }, now))).toEqual({
      queued: [2],
      unknown: [],
      notReplayable: [],
    });
    expect(await withLog(WRITE, (log) => log.replay({ status: 'dead' }, now))).toEqual({
      queued: [1, 4],
      unknown: [],
      notReplayable: [],
    });
    const pending = await withLog(READ, (log) => log.events({ status: 'pending' }));
    expect(pending.map((e) => [e.id, e.attempts, e.next_attempt_at])).toEqual([
      [4, 0, now],
      [2, 0, now],
      [1, 0, now],
    ]);
  });

  it('tracks a registration once, its first poll after the grace period', async () => {
    const now = new Date(T0);
    const t = { requestId: 'req-1', correlationId: null, nuProposta: 7, via: 'declared' as const };
    const first = await withLog(WRITE, (log) => log.track(t, now, MINUTE));
    expect(first.created).toBe(true);
    expect(first.averbacao).toMatchObject({
      request_id: 'req-1',
      nu_proposta: 7,
      status: 'queued',
      tracked_via: 'declared',
      next_poll_at: at(MINUTE),
    });
    const again = await withLog(WRITE, (log) => log.track(t, new Date(at(5 * MINUTE)), MINUTE));
    expect(again.created).toBe(false);
    expect(again.averbacao?.next_poll_at).toBe(at(MINUTE));
  });

  it('ends every console session and records it in the audit, together', async () => {
    for (const id of ['a', 'b'])
      await store.exec(
        `INSERT INTO console_sessions (id_hash, role, created_at, expires_at, last_seen) VALUES (?, 'admin', ?, ?, ?)`,
        [id, T0, at(60 * MINUTE), T0],
      );
    const audit = (ended: number): NewAuditEntry => ({
      at: at(MINUTE),
      role: null,
      session: null,
      action: 'end_sessions',
      target: 'command',
      detail: { ended },
      ip: null,
    });
    expect(await withLog(WRITE, (log) => log.endSessions(audit))).toBe(2);
    expect(Number(await store.one('SELECT count(*) AS n FROM console_sessions'))).toBe(0);
    expect(await store.one(`SELECT detail FROM console_audit WHERE action = 'end_sessions'`)).toBe(
      '{"ended":2}',
    );
    expect(await withLog(WRITE, (log) => log.endSessions(audit))).toBe(0);
  });

  it('says when the outbox may have more, where the store can tell', async () => {
    await withLog({ access: 'follow' }, async (log) => {
      let heard = (): void => undefined;
      const notified = new Promise<void>((resolve) => (heard = resolve));
      await log.listen(() => heard());
      if (store.notify === null) return; // the file has no notifications: feed --follow polls
      await store.notify();
      await notified;
    });
  });
});
