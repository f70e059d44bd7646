import { join } from 'node:path';
import type { Pool } from 'pg';
import type { LocalPostgres } from '../../rigs/local-postgres';
import { type CommandSession, withCommandStore } from '../../src/open-store';
import { pgPoolStorePort } from '../../src/postgres/pg-port';
import { type CommandStore, type ConsoleStore, consoleStore } from '../../src/core/store-port';
import { sqliteStorePort } from '../../src/sqlite/sqlite-port';
import { pgStoreSql, poolRunners } from '../../src/postgres/pg-statements';
import { OUTBOX_CHANNEL } from '../../src/postgres/pg-outbox';
import { STEP_SQL } from '../../src/core/event-step';
import { postgresDialect, sqliteDialect } from '../../src/domain/sql/dialect';
import { prepareShared } from '../../src/sqlite/sqlite-prepare';
import { effectsFrom, effectsParams, type EffectsRow } from '../../src/domain/sql/outbox-effects';
import { sqlOf } from '../../src/postgres/pg-sql';
import { type Config, loadConfig } from '../../src/config';
import {
  type BatchReport,
  PassInterrupted,
  pruneBodies,
  pruneForwarded,
  prunePass,
} from '../../src/core/prune-pass';
import {
  type ConsoleRole,
  type NewAuditEntry,
  type NewRefusal,
  type OverviewQuery,
  REFUSAL_ROWS_PER_WINDOW,
  tokenFingerprint,
} from '../../src/domain/console';
import { EVENT_STATUSES } from '../../src/domain/event-status';
import { FEED_DEFAULT_TYPES, type ForwardListFilter } from '../../src/domain/forwarding/admin';
import {
  type Destination,
  destinationFromEnv,
  type MessageType,
} from '../../src/domain/forwarding/destinations';
import {
  type EventEffects,
  type OutboxEntry,
  outboxEntries,
  type ProcessedEvent,
  serializeMessage,
} from '../../src/domain/forwarding/messages';
import type { AttemptRecord, SenderStore } from '../../src/domain/forwarding/sender-store';
import type { StoreQuery, StoreSql } from '../../src/domain/sql/store-sql';
import { MARK_STALE, RECORD_POLL } from '../../src/domain/sql/registry-poll-statements';
import { storeGauges } from '../../src/core/gauges';
import { destinationGauges, forwardingFigures, senderStore } from '../../src/core/sender-queries';
import { latestProposals, type ProposalKey, stuckProposals } from '../../src/core/proposal-lists';
import { sqliteStoreSql } from '../../src/sqlite/sqlite-statements';
import { averbacoesRepo, openStore, type Store } from '../../src/sqlite/store';
import { openDatabase } from '../../src/sqlite/database';
import { runTurns } from '../../src/runtime/cluster/turn';
import { type HandlerEvent, HandlerRouter } from '../../src/domain/event-router';
import type { Logger } from '../../src/logger';
import { Pipeline } from '../../src/runtime/single/pipeline';
import { workKeyOf } from '../../src/domain/work-key';
import { type LogLine, memoryLogger, openPool } from '../helpers/cluster-db';
import { createTestDatabase, withClient, workerPostgres, migrateUrl } from '../helpers/postgres';
import { delivery } from '../helpers/payloads';
import { tempDir } from '../helpers/tmp';
import { cpfsInText, subjectHash } from '../../src/domain/subject';
import { noticeWebhookId, type SubjectHoldings } from '../../src/core/subject-find';

/**
 * The stores' conformance suite (Hookdeck Outpost's `drivertest`): every behaviour of a store port
 * is written once, below, and runs against each driver — the SQLite file and PostgreSQL — each case
 * on an empty, migrated store (a new SQLite file; PostgreSQL's tables emptied). The ports: the console's store (`ConsoleStore`), the log commands'
 * (`CommandStore`), the registry poll's shared statements (domain/sql/registry-poll-statements.ts) and the
 * forwarding sender's outbox (`SenderStore`). A driver is described once, in {@link DRIVERS}: how it
 * opens a fresh store, builds each port's adapter as the receiver does, and writes or reads rows
 * the ports have no method for (`exec`/`all`, one SQL text with `?` placeholders for both).
 *
 * To add a behaviour: one `behaviour(name, fn)` in its port's `describe`, using the ports and the
 * raw access of {@link Opened} only. A driver found wrong and not fixed yet names the behaviour in
 * its `knownWrong`: the case runs as `it.failing`, so the suite says so, and fails once the adapter
 * is fixed (take the name out then). The mode-equality tests (both modes' HTTP answers) are apart.
 */

/** One driver on a fresh store: the ports' adapters on it, and raw access for what they cannot write. */
interface Opened {
  /** `sql` with `?` placeholders, run on the store directly (not through a port). */
  exec(sql: string, params?: readonly unknown[]): Promise<void>;
  /** The rows of a query, as `exec`; timestamps as ISO-8601 strings in both stores. */
  all(sql: string, params?: readonly unknown[]): Promise<Record<string, unknown>[]>;
  /** A delivery as the ingest (SQLite) or the relay (PostgreSQL) writes it. */
  addDelivery(receivedAt: string, outcome: string, durationMs?: number): Promise<void>;
  consoleQueries: ConsoleStore;
  /** What `withCommandStore` opens (DATABASE_PATH or DATABASE_URL), and the name the messages give it. */
  commands: { config: Config; name: string };
  /** Sends the outbox's notification (PostgreSQL); null where the store has none. */
  notify: (() => Promise<void>) | null;
  /** The registry poll's shared statements, as the poller (SQLite) or the poll job (PostgreSQL) runs them. */
  poll: {
    record(
      requestId: string,
      p: { attempts: number; nextPollAt: string | null; outcome: string; now: string },
    ): Promise<boolean>;
    markStale(requestId: string, now: string): Promise<void>;
  };
  sender: SenderStore;
  /**
   * The outbox's read-back (domain/sql/outbox-effects.ts) and the entries it gives, as the
   * forwarding handler (SQLite) or the turn (PostgreSQL) runs it: feed on, no destination.
   */
  outboxOf(event: ProcessedEvent, now: Date): Promise<OutboxEntry[]>;
  /** The log as code written once for both stores reaches it (src/core/). */
  storeSql: StoreSql;
  /** Processing: the event step (core/event-step.ts) as each store's scheduler runs it. */
  processing: Processing;
  close(): Promise<void>;
}

/** An event to process, as the ingest (SQLite) or the relay (PostgreSQL) stores it: pending. */
interface NewEvent {
  kind: 'event' | 'registry';
  evento: string | null;
  nu: number | null;
  requestId: string | null;
  registryStatus: string | null;
  dedupKey: string;
  receivedAt: string;
  body: string;
}

/** What a run of processing reported: metrics, error handlers, log lines. */
interface RunReport {
  processed: [string, string][];
  /** The failures told to onError (the handler-failure metric of each mode). */
  errors: string[];
  log: LogLine[];
}

interface Processing {
  store(e: NewEvent): Promise<void>;
  /**
   * Runs every runnable event as the store's scheduler does, the clock at `now`, until none is left
   * runnable: SQLite mode's pipeline started on the file (its backlog recovered) until idle, then
   * stopped; cluster mode's turns of every key with work, in one transaction (a batch of turns).
   */
  run(now: Date, handlers?: HandlerRouter): Promise<RunReport>;
}

/** The failure rule the runs share: 3 attempts, 1 s between them (no jitter: random 0.5). */
const PROCESSING = {
  maxAttempts: 3,
  backoff: { baseMs: 1000, maxMs: 1000 },
  random: () => 0.5,
  schedule: { graceMs: 60_000, intervalMs: 1000, maxIntervalMs: 2000, maxAgeMs: 3_600_000 },
  outbox: { destinations: [] as Destination[], feedEnabled: true },
};

/** SQLite mode's processing on the file at `path`: the pipeline as runtime/single/single-mode.ts builds it. */
function sqliteProcessing(path: string, store: Store): Processing {
  return {
    store: async (e) => {
      store.db
        .prepare(
          `INSERT INTO events (dedup_key, webhook_id, kind, evento, nu_proposta, request_id, registry_status, received_at,
             body, body_bytes, status)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending')`,
        )
        .run(
          e.dedupKey,
          e.dedupKey,
          e.kind,
          e.evento,
          e.nu,
          e.requestId,
          e.registryStatus,
          e.receivedAt,
          e.body,
          e.body.length,
        );
    },
    run: async (now, handlers) => {
      const report: RunReport = { processed: [], errors: [], log: [] };
      const logger = memoryLogger();
      report.log = logger.lines;
      const db = openDatabase(path, { synchronous: 'NORMAL' });
      const partnerDb = handlers === undefined ? undefined : openDatabase(path, { synchronous: 'NORMAL' });
      const pipeline = new Pipeline(db, {
        onError: (err) => void report.errors.push(err.message),
        ...PROCESSING,
        clock: { now: () => now, monotonic: () => performance.now() },
        logger: logger as unknown as Logger,
        sweepIntervalMs: 3_600_000,
        stages: PROCESSING,
        partners:
          partnerDb === undefined || handlers === undefined
            ? undefined
            : { partner: handlers, db: partnerDb },
        metrics: {
          processed: (evento, outcome) => void report.processed.push([evento, outcome]),
          depth: () => {},
        },
      });
      try {
        pipeline.start();
        await pipeline.onIdle();
        await pipeline.stop(5000);
      } finally {
        db.close();
        partnerDb?.close();
      }
      return report;
    },
  };
}

/** Cluster mode's processing on `pool`: a batch of turns of every key with work, as ClusterNode runs it. */
function postgresProcessing(pool: Pool): Processing {
  return {
    store: async (e) => {
      await pool.query(
        `INSERT INTO events (dedup_key, webhook_id, kind, evento, nu_proposta, request_id, registry_status, received_at,
           body, body_bytes, status)
         VALUES ($1, $1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending')`,
        [
          e.dedupKey,
          e.kind,
          e.evento,
          e.nu === null ? null : String(e.nu),
          e.requestId,
          e.registryStatus,
          e.receivedAt,
          Buffer.from(e.body),
          Buffer.byteLength(e.body),
        ],
      );
    },
    run: async (now, handlers) => {
      const report: RunReport = { processed: [], errors: [], log: [] };
      const logger = memoryLogger();
      report.log = logger.lines;
      const { rows: work } = await pool.query<{
        id: string;
        nu_proposta: string | null;
        request_id: string | null;
      }>("SELECT id, nu_proposta, request_id FROM events WHERE status IN ('pending', 'failed')");
      const keys = [...new Set(work.map((w) => workKeyOf({ ...w, id: Number(w.id) })))];
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await runTurns(sqlOf(client), keys, {
          ...PROCESSING,
          queueTurns: async () => undefined,
          schedulePoll: async () => undefined,
          now: () => now,
          logger,
          onProcessed: (evento, outcome) => void report.processed.push([evento, outcome]),
          onError: (err) => void report.errors.push(err.message),
          handlers,
        });
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK');
        throw err;
      } finally {
        client.release();
      }
      return report;
    },
  };
}

interface Driver {
  name: 'SQLite' | 'PostgreSQL';
  open(): Promise<Opened>;
  /** Behaviours the driver is known to get wrong (see the file's note). */
  knownWrong?: readonly string[];
}

/**
 * The jest worker's PostgreSQL and the file's database on it, migrated by the first PostgreSQL
 * case; each case empties its tables first (a fresh store, at a TRUNCATE's cost rather than a
 * CREATE DATABASE and the migrations': about 0.3 s a case). Dropped at the end.
 */
let server: LocalPostgres | undefined;
let database: { url: string; truncate: string } | undefined;
afterAll(async () => {
  await server?.stop();
});

/** The file's database, migrated: its URL, and the statement that empties it. */
async function migratedPostgres(): Promise<{ url: string; truncate: string }> {
  if (database !== undefined) return database;
  server = await workerPostgres();
  const url = await createTestDatabase(server, 'store_conf');
  await migrateUrl(url);
  const tables = await withClient(url, async (c) => {
    const { rows } = await c.query<{ list: string }>(
      `SELECT string_agg(format('%I', tablename), ', ') AS list FROM pg_tables
       WHERE schemaname = 'public' AND tablename <> 'schema_migrations'`,
    );
    return rows[0]!.list;
  });
  database = { url, truncate: `TRUNCATE ${tables} RESTART IDENTITY CASCADE` };
  return database;
}

/**
 * Subjects (issue 45) found wrong on both stores, reported and not fixed here (core/ is another
 * engineer's): the erasure journal's summary overwritten by a re-run (core/subject-erase.ts
 * `finish`), and an erased event's integers taken for CPFs (domain/subject.ts `erasedEvent`).
 * PostgreSQL alone: `find`'s averbações keep nu_proposta as text (core/subject-find.ts).
 */
const ERASE_AGAIN = 'erase again (the same erasure id): nothing changes, no second notice';
const LATE_EVENT_NUMBERS = 'stays erased: a late event keeps its ids and amounts in its stored body';
const FIND_SHAPE = "find: every row's nu_proposta in the SQLite log shape (an integer as a number)";

const DRIVERS: Driver[] = [
  {
    name: 'SQLite',
    open: async () => {
      const dir = tempDir('consig-conformance-');
      const path = join(dir.dir, 'consig.db');
      const store = openStore(path, { migrate: true });
      const averbacoes = averbacoesRepo(store.db);
      return {
        exec: async (sql, params = []) => {
          store.db.prepare(sql).run(...params);
        },
        all: async (sql, params = []) => store.db.prepare(sql).all(...params) as Record<string, unknown>[],
        addDelivery: async (receivedAt, outcome, durationMs = 1) => {
          store.db
            .prepare(
              `INSERT INTO deliveries (received_at, path, outcome, http_status, duration_ms) VALUES (?, '/webhooks', ?, 200, ?)`,
            )
            .run(receivedAt, outcome, durationMs);
        },
        // As main.ts builds it.
        consoleQueries: consoleStore(sqliteStorePort(store)),
        commands: { config: loadConfig({ DATABASE_PATH: path }), name: path },
        notify: null,
        poll: {
          record: async (requestId, p) => averbacoes.recordPoll(requestId, p),
          markStale: async (requestId, now) => {
            averbacoes.markStale(requestId, now);
          },
        },
        // As the sender thread builds it (runtime/sender-worker.ts).
        sender: senderStore(sqliteStoreSql(store.db)),
        // As the event step runs it in the pipeline's turn (core/event-step.ts).
        outboxOf: async (event, now) => {
          const row = prepareShared<EffectsRow>(store.db, STEP_SQL.outbox.text, { raw: true }).get(
            effectsParams(event),
          );
          return outboxEntries(effectsFrom(sqliteDialect, event, row!), now.toISOString(), [], true);
        },
        storeSql: sqliteStoreSql(store.db),
        processing: sqliteProcessing(path, store),
        close: async () => {
          store.close();
          dir.cleanup();
        },
      };
    },
    knownWrong: [],
  },
  {
    name: 'PostgreSQL',
    open: async () => {
      const { url, truncate } = await migratedPostgres();
      const pool: Pool = openPool(url);
      await pool.query(truncate);
      const numbered = (sql: string) => {
        let n = 0;
        return sql.replace(/\?/g, () => `$${++n}`);
      };
      const all = async (sql: string, params: readonly unknown[] = []) =>
        (await pool.query(numbered(sql), [...params])).rows.map((row: Record<string, unknown>) =>
          Object.fromEntries(
            Object.entries(row).map(([k, v]) => [k, v instanceof Date ? v.toISOString() : v]),
          ),
        );
      const admin = pgPoolStorePort({
        pool,
        name: 'conformance',
        running: () => true,
        queueTurns: async () => undefined,
        schedulePoll: async () => undefined,
      });
      let spoolId = 0;
      const where = new URL(url);
      return {
        exec: async (sql, params = []) => {
          await pool.query(numbered(sql), [...params]);
        },
        all,
        addDelivery: async (receivedAt, outcome, durationMs = 1) => {
          await pool.query(
            `INSERT INTO deliveries (replica, spool_id, received_at, path, outcome, http_status, duration_ms)
             VALUES ('r1', $1, $2::timestamptz, '/webhooks', $3, 200, $4)`,
            [++spoolId, receivedAt, outcome, durationMs],
          );
        },
        // As a replica builds it on its pool.
        consoleQueries: consoleStore(admin),
        commands: {
          config: loadConfig({ DATABASE_URL: url }),
          name: `postgres://${where.hostname}:${where.port || 5432}${where.pathname}`,
        },
        notify: async () => {
          await pool.query('SELECT pg_notify($1, $2)', [OUTBOX_CHANNEL, '']);
        },
        // As the poll job runs them (runtime/cluster/poll-job.ts).
        poll: {
          record: async (requestId, p) => {
            const { rows } = await pool.query<{ polling: boolean }>(RECORD_POLL, [
              requestId,
              p.attempts,
              p.nextPollAt,
              p.now,
              p.outcome,
            ]);
            return rows[0]?.polling ?? false;
          },
          markStale: async (requestId, now) => {
            await pool.query(MARK_STALE, [requestId, now]);
          },
        },
        // As runtime/cluster/forwarder.ts builds it.
        sender: senderStore(pgStoreSql(poolRunners(pool), pool)),
        // As the event step runs it in a turn (core/event-step.ts): a named prepared statement.
        outboxOf: async (event, now) => {
          const [row] = await sqlOf(pool).prepared<EffectsRow>(STEP_SQL.outbox, effectsParams(event));
          return outboxEntries(effectsFrom(postgresDialect, event, row!), now.toISOString(), [], true);
        },
        storeSql: admin.sql,
        processing: postgresProcessing(pool),
        close: () => pool.end(),
      };
    },
    knownWrong: [],
  },
];

const T0 = '2026-11-21T13:00:00.000Z';
const at = (ms: number): string => new Date(Date.parse(T0) + ms).toISOString();
const MINUTE = 60_000;
const HOUR = 3_600_000;

/** An event row, in both stores (the outbox's messages reference one in PostgreSQL). */
const addEvent = (store: Opened, id: number, nu: number, status: string, duplicates = 0) =>
  store.exec(
    `INSERT INTO events (id, dedup_key, kind, evento, nu_proposta, received_at, status, duplicates)
     VALUES (?, ?, 'event', 'proposta.criada', ?, ?, ?, ?)`,
    [id, `wh-${id}`, nu, at(id * MINUTE), status, duplicates],
  );

// --- the console's store (ConsoleStore) ---------------------------------------------------------

interface NewAverbacao {
  requestId: string;
  nu: number;
  status: 'queued' | 'processing' | 'completed' | 'error';
  stale: boolean;
  /** Waiting for a poll: next_poll_at set. */
  waiting: boolean;
}

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

// --- the log commands' port (CommandStore) -------------------------------------------------------

const READ: CommandSession = { access: 'read' };
const WRITE: CommandSession = { access: 'write', command: 'conformance' };

describe.each(DRIVERS)('the stores on $name', (driver) => {
  const declared = new Set<string>();
  const behaviour = (name: string, fn: () => Promise<void>) => {
    declared.add(name);
    (driver.knownWrong?.includes(name) ? it.failing : it)(name, fn);
  };
  let store: Opened;
  beforeEach(async () => {
    store = await driver.open();
  });
  afterEach(async () => {
    await store.close();
  });

  /** The one path of the code written once for both stores (domain/sql/store-sql.ts `StoreSql`). */
  describe('StoreSql', () => {
    behaviour('runs $n statements, placeholders in any order, rows in the SQLite log shape', async () => {
      await addEvent(store, 7, 1234, 'done', 2);
      const rows = await store.storeSql.read((q) =>
        q.rows(
          `SELECT id, nu_proposta, received_at, duplicates FROM events WHERE duplicates = $2 AND id = $1`,
          [7, 2],
        ),
      );
      expect(rows).toEqual([
        {
          id: 7,
          nu_proposta: store.storeSql.dialect.storedNu(1234),
          received_at: at(7 * MINUTE),
          duplicates: 2,
        },
      ]);
    });
    behaviour('answers how many rows a write changed, and commits it', async () => {
      await addEvent(store, 1, 1, 'failed');
      await addEvent(store, 2, 2, 'failed');
      const changed = await store.storeSql.write((q) =>
        q.run(
          `UPDATE events SET status = 'pending', next_attempt_at = ${q.dialect.instant('$1')} WHERE status = 'failed'`,
          [at(HOUR)],
        ),
      );
      expect(changed).toBe(2);
      expect(await store.all(`SELECT next_attempt_at FROM events ORDER BY id`)).toEqual([
        { next_attempt_at: at(HOUR) },
        { next_attempt_at: at(HOUR) },
      ]);
    });
    behaviour('rolls a rejected write back whole', async () => {
      await addEvent(store, 1, 1, 'failed');
      await expect(
        store.storeSql.write(async (q) => {
          await q.run(`UPDATE events SET status = 'pending' WHERE id = $1`, [1]);
          throw new Error('the handler changed its mind');
        }),
      ).rejects.toThrow('the handler changed its mind');
      expect(await store.all(`SELECT status FROM events`)).toEqual([{ status: 'failed' }]);
    });
  });

  /**
   * The console's store (core/store-port.ts `ConsoleStore`), built from the port as the
   * server builds it: on the SQLite file, and on a replica's pool (both core/store-port.ts `consoleStore`).
   */
  describe('the console log', () => {
    let log: ConsoleStore;
    beforeEach(() => {
      log = store.consoleQueries;
    });
    /** An averbação as tracking writes it (core/store-port.ts `track`). */
    const addAverbacao = (a: NewAverbacao) =>
      store.exec(
        `INSERT INTO averbacoes (request_id, nu_proposta, status, tracked_via, stale, next_poll_at, created_at, updated_at)
         VALUES (?, ?, ?, 'started', ?, ?, ?, ?)`,
        [a.requestId, a.nu, a.status, a.stale ? 1 : 0, a.waiting ? T0 : null, T0, T0],
      );

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
          subject: null,
          name: null,
          email: null,
        });
        expect(await log.sessions.live('unknown', at(MINUTE))).toBeUndefined();
      });

      behaviour(
        'keeps the person of a session the identity provider opened (issue 34), never a token',
        async () => {
          const person = { subject: 'u-1', name: 'Maria Souza', email: 'maria@lender.example' };
          await log.sessions.create({ ...session('h1', 'admin', 'oidc-fp'), person });
          expect(await log.sessions.live('h1', at(MINUTE))).toMatchObject({
            role: 'admin',
            token_fp: 'oidc-fp',
            ...person,
          });
        },
      );

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

      behaviour(
        "keeps the identity provider's sessions while it is the one configured, of either role",
        async () => {
          await log.sessions.create(session('maria', 'admin', 'oidc-fp'));
          await log.sessions.create(session('joao', 'viewer', 'oidc-fp'));
          await log.sessions.create(session('token', 'admin', ADMIN_FP));
          // The provider configured without break-glass: the tokens open nothing, their sessions end.
          expect(await log.sessions.endOthers({ admin: null, viewer: null, oidc: 'oidc-fp' })).toBe(1);
          expect(await log.sessions.live('maria', at(1))).toBeDefined();
          expect(await log.sessions.live('joao', at(1))).toBeDefined();
          // Another provider or client: the people's sessions end.
          expect(await log.sessions.endOthers({ admin: null, viewer: null, oidc: 'other-fp' })).toBe(2);
        },
      );
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
        expect(await log.signInFailures.current('10.0.0.1', at(0))).toEqual({
          since: at(WINDOW),
          failures: 1,
        });
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
          person: null,
        });
      });

      behaviour('names the person of an action and of a refusal (issue 34)', async () => {
        await log.audit.record({
          at: T0,
          role: 'admin',
          session: 'abcd1234',
          person: 'maria@lender.example',
          action: 'sign_in',
          target: null,
          detail: { via: 'oidc' },
          ip: null,
        });
        await log.audit.refuse({
          at: at(MINUTE),
          role: 'viewer',
          session: 'ef015678',
          person: 'joao@lender.example',
          route: 'POST /console/sessions/end',
          reason: 'role',
          ip: '10.0.0.8',
        });
        const rows = await page();
        expect(rows.map((r) => [r.action, r.person])).toEqual([
          ['refused', 'joao@lender.example'],
          ['sign_in', 'maria@lender.example'],
        ]);
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

    describe('the events page', () => {
      /** Event `id`, received `id` minutes after T0, its body as the ingest stores it (SQLite: text). */
      const addWithBody = (id: number, evento: string, body: unknown) =>
        store.exec(
          `INSERT INTO events (id, dedup_key, kind, evento, nu_proposta, received_at, status, body)
           VALUES (?, ?, 'event', ?, 7, ?, 'done', ?)`,
          [
            id,
            `wh-${id}`,
            evento,
            at(id * MINUTE),
            store.storeSql.dialect.name === 'sqlite'
              ? JSON.stringify(body)
              : Buffer.from(JSON.stringify(body)),
          ],
        );
      beforeEach(async () => {
        for (let id = 1; id <= 12; id++)
          await addWithBody(id, id === 2 ? 'proposta.cancelada' : 'proposta.criada', {
            dados: { n: id, ok: id % 2 === 0 },
          });
      });
      const ids = (page: { rows: { id: number }[] }) => page.rows.map((r) => r.id);

      behaviour('lists a time range newest first, by keyset pages', async () => {
        expect(ids(await log.events({ from: at(3 * MINUTE), to: at(6 * MINUTE) }))).toEqual([5, 4, 3]);
        const first = await log.events({ from: at(3 * MINUTE), limit: 4 });
        expect([ids(first), first.next]).toEqual([[12, 11, 10, 9], 9]);
        expect(ids(await log.events({ from: at(3 * MINUTE), limit: 4, before: first.next! }))).toEqual([
          8, 7, 6, 5,
        ]);
        expect((await log.events({ limit: 1 })).rows[0]).toMatchObject({
          id: 12,
          nu_proposta: 7,
          evento: 'proposta.criada',
        });
      });

      behaviour(
        'searches a condition without an index one window per page, and says where it stopped',
        async () => {
          const pages = [];
          let before: number | undefined;
          for (let i = 0; i < 3; i++) {
            const page = await log.events({ evento: 'proposta.cancelada', scanCap: 5, before });
            pages.push([ids(page), page.stoppedAt]);
            if (page.next === null) break;
            before = page.next;
          }
          expect(pages).toEqual([
            [[], 8],
            [[], 3],
            [[2], null],
          ]);
          expect(await log.countEvents({ evento: 'proposta.cancelada' })).toBe(1);
        },
      );

      behaviour('matches JSON leaves of the body by value and type', async () => {
        const leaf = (key: string, value: string | number | boolean | null) => ({
          path: `$."dados"."${key}"`,
          keys: ['dados', key],
          value,
        });
        expect(ids(await log.events({ json: [leaf('n', 4)] }))).toEqual([4]);
        expect(ids(await log.events({ json: [leaf('n', '4')] }))).toEqual([]);
        expect(await log.countEvents({ json: [leaf('ok', true)] })).toBe(6);
        expect(await log.eventIds({ json: [leaf('ok', false)] }, 6, 2)).toEqual([5, 3]);
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
          await addAverbacao({ requestId, nu: 7, status, stale, waiting });
      });
      const ids = async (f: Parameters<ConsoleStore['averbacoes']>[0]) => {
        const page = await log.averbacoes(f);
        return { ids: page.rows.map((r) => r.request_id), more: page.next !== null };
      };

      behaviour('lists newest tracked first, by pages, with the filters', async () => {
        expect(await ids({ limit: 2 })).toEqual({ ids: ['r5', 'r4'], more: true });
        const first = await log.averbacoes({ limit: 2 });
        expect(await ids({ limit: 2, before: first.next! })).toEqual({ ids: ['r3', 'r2'], more: true });
        expect(await ids({ limit: 3, before: first.next! })).toEqual({
          ids: ['r3', 'r2', 'r1'],
          more: false,
        });
        expect(await ids({ status: 'queued' })).toEqual({ ids: ['r3', 'r2'], more: false });
        expect(await ids({ stale: true })).toEqual({ ids: ['r4', 'r3'], more: false });
        expect(await ids({ waiting: true })).toEqual({ ids: ['r4', 'r2'], more: false });
        expect((await log.averbacoes({ limit: 1 })).rows[0]).toMatchObject({
          nu_proposta: 7,
          status: 'error',
        });
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

  /**
   * The log commands' port (core/store-port.ts `CommandStore`, src/open-store.ts `withCommandStore`), opened as the commands open it —
   * `withCommandStore` on a Config with DATABASE_PATH, or with DATABASE_URL. The behaviours are those
   * of the methods only the commands have (stats, proposal lists, replay, track on the command's
   * connection, end-sessions, listen) and the name; the admin API's shared reads are covered by the
   * HTTP tests of both modes.
   */
  describe("the commands' log", () => {
    const withLog = <T>(session: CommandSession, use: (log: CommandStore) => Promise<T>): Promise<T> =>
      withCommandStore(store.commands.config, session, use);
    /** One value of a one-row query, as the driver gives it. */
    const one = async (sql: string, params?: readonly unknown[]) =>
      Object.values((await store.all(sql, params))[0]!)[0];
    const addProposal = (nu: number, status: string, updatedAt: string) =>
      store.exec(
        `INSERT INTO proposals (nu_proposta, stage, status, created_at, updated_at) VALUES (?, 'Proposta', ?, ?, ?)`,
        [nu, status, T0, updatedAt],
      );

    behaviour('names the log as the messages say it, never with a password', async () => {
      expect(await withLog(READ, async (log) => log.name)).toBe(store.commands.name);
    });

    behaviour('gives the figures of stats, in the SQLite log shape', async () => {
      await addEvent(store, 1, 7, 'done', 2);
      await addEvent(store, 2, 7, 'done');
      await addEvent(store, 3, 8, 'dead', 1);
      await addEvent(store, 4, 9, 'pending');
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
      if (driver.name === 'PostgreSQL')
        expect(replicas).toEqual([{ replica: 'r1', deliveries: 3, last_received_at: at(3 * MINUTE) }]);
      else expect(replicas).toBeUndefined();
    });

    behaviour(
      'lists proposals most recently changed first, and stuck ones longest first, up to the limit',
      async () => {
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
      },
    );

    behaviour(
      'pages proposals by keyset across statuses, equal times ordered integers first, then text by bytes',
      async () => {
        await addProposal(5, 'em_analise', T0);
        await addProposal(12, 'aprovada', T0);
        await store.exec(
          `INSERT INTO proposals (nu_proposta, stage, status, created_at, updated_at) VALUES (?, 'Proposta', ?, ?, ?)`,
          ['ABC-1', 'em_analise', T0, T0],
        );
        await addProposal(3, 'aprovada', at(MINUTE));
        const statuses = ['em_analise', 'aprovada'] as const;
        const cutoffs = statuses.map((status) => ({ status, before: at(HOUR) }));
        const stuck: (number | string)[] = [];
        let after: ProposalKey | undefined;
        for (;;) {
          const rows = await store.storeSql.read((q) => stuckProposals(q, cutoffs, { after, limit: 2 }));
          if (rows.length === 0) break;
          stuck.push(...rows.map((r) => r.nu_proposta));
          after = rows[rows.length - 1];
        }
        expect(stuck).toEqual([5, 12, 'ABC-1', 3]);
        const latest: (number | string)[] = [];
        let before: ProposalKey | undefined;
        for (;;) {
          const rows = await store.storeSql.read((q) => latestProposals(q, statuses, { before, limit: 2 }));
          if (rows.length === 0) break;
          latest.push(...rows.map((r) => r.nu_proposta));
          before = rows[rows.length - 1];
        }
        expect(latest).toEqual([3, 'ABC-1', 12, 5]);
      },
    );

    behaviour("gives /metrics' figures of the log, 0 included where a status has stuck rules", async () => {
      await addEvent(store, 1, 7, 'done');
      await addEvent(store, 2, 7, 'failed');
      await addEvent(store, 3, 8, 'pending');
      await addEvent(store, 4, 8, 'dead');
      const add = (id: string, status: string, stale: boolean, waiting: boolean) =>
        store.exec(
          `INSERT INTO averbacoes (request_id, status, tracked_via, stale, next_poll_at, created_at, updated_at)
           VALUES (?, ?, 'declared', ?, ?, ?, ?)`,
          [id, status, driver.name === 'PostgreSQL' ? stale : Number(stale), waiting ? T0 : null, T0, T0],
        );
      await add('r1', 'queued', false, true);
      await add('r2', 'queued', true, true);
      await add('r3', 'completed', false, false);
      await addProposal(7, 'em_analise', T0);
      const cutoffs = [
        { status: 'em_analise' as const, before: at(MINUTE) },
        { status: 'aprovada' as const, before: at(MINUTE) },
      ];
      expect(await store.storeSql.read((q) => storeGauges(q, cutoffs))).toEqual({
        eventsByStatus: { done: 1, failed: 1, pending: 1, dead: 1 },
        averbacoesByStatus: { queued: 2, completed: 1 },
        averbacoesStale: 1,
        averbacoesWaiting: 2,
        // Event 2 (failed, waiting for its retry) was received first; the dead letter does not count.
        oldestUnprocessedAt: at(2 * MINUTE),
        stuckByStatus: { em_analise: 1, aprovada: 0 },
      });
    });

    behaviour('lists events newest first, with the filters and the `beforeId` cursor', async () => {
      await addEvent(store, 1, 7, 'done');
      await addEvent(store, 2, 8, 'dead');
      await addEvent(store, 3, 7, 'dead');
      await addEvent(store, 4, 7, 'done');
      const ids = (filter: Parameters<CommandStore['events']>[0]) =>
        withLog(READ, async (log) => (await log.events(filter)).map((e) => e.id));
      expect(await ids({})).toEqual([4, 3, 2, 1]);
      expect(await ids({ status: 'dead' })).toEqual([3, 2]);
      expect(await ids({ nuProposta: 7, status: 'done' })).toEqual([4, 1]);
      expect(await ids({ evento: 'proposta.criada', kind: 'event', beforeId: 4, limit: 2 })).toEqual([3, 2]);
      expect(await ids({ evento: 'x.y' })).toEqual([]);
      const [row] = await withLog(READ, (log) => log.events({ nuProposta: 8 }));
      expect(row).toMatchObject({ id: 2, nu_proposta: 8, status: 'dead', received_at: at(2 * MINUTE) });
    });

    behaviour('lists deliveries newest first, by outcome, by pages', async () => {
      await store.addDelivery(at(MINUTE), 'accepted');
      await store.addDelivery(at(2 * MINUTE), 'duplicate');
      await store.addDelivery(at(3 * MINUTE), 'accepted');
      const times = (filter: Parameters<CommandStore['deliveries']>[0]) =>
        withLog(READ, async (log) => (await log.deliveries(filter)).map((d) => d.received_at));
      expect(await times({})).toEqual([at(3 * MINUTE), at(2 * MINUTE), at(MINUTE)]);
      expect(await times({ outcome: 'accepted' })).toEqual([at(3 * MINUTE), at(MINUTE)]);
      expect(await times({ beforeId: 2, limit: 1 })).toEqual([at(MINUTE)]);
    });

    behaviour('gives a proposal and its timeline, in the SQLite log shape', async () => {
      await addProposal(7, 'em_analise', at(MINUTE));
      await addEvent(store, 1, 7, 'done');
      await addEvent(store, 2, 8, 'done');
      await addEvent(store, 3, 7, 'pending');
      await store.exec(
        `INSERT INTO proposal_transitions (event_id, nu_proposta, evento, from_status, to_status, applied, reason, at)
         VALUES (1, 7, 'proposta.criada', NULL, 'em_analise', ?, 'created', ?)`,
        [driver.name === 'PostgreSQL' ? true : 1, at(MINUTE)],
      );
      const found = await withLog(READ, (log) => log.proposal(7));
      expect(found.proposal).toMatchObject({ nu_proposta: 7, status: 'em_analise', updated_at: at(MINUTE) });
      expect(found.timeline.map((t) => [t.event_id, t.event_status, t.to_status, t.applied])).toEqual([
        [1, 'done', 'em_analise', 1],
        [3, 'pending', null, null],
      ]);
      expect(await withLog(READ, (log) => log.proposal(99))).toEqual({ proposal: undefined, timeline: [] });
    });

    behaviour('lists tracked registrations newest first with the filters, and gives one back', async () => {
      const add = (id: string, nu: number, status: string, stale: boolean, minute: number) =>
        store.exec(
          `INSERT INTO averbacoes (request_id, nu_proposta, status, tracked_via, stale, created_at, updated_at)
           VALUES (?, ?, ?, 'declared', ?, ?, ?)`,
          [id, nu, status, driver.name === 'PostgreSQL' ? stale : Number(stale), at(minute * MINUTE), T0],
        );
      await add('r1', 7, 'queued', false, 1);
      await add('r2', 8, 'queued', true, 2);
      await add('r3', 7, 'completed', true, 3);
      const ids = (filter: Parameters<CommandStore['averbacoes']>[0]) =>
        withLog(READ, async (log) => (await log.averbacoes(filter)).map((a) => a.request_id));
      expect(await ids({})).toEqual(['r3', 'r2', 'r1']);
      expect(await ids({ status: 'queued', limit: 1 })).toEqual(['r2']);
      expect(await ids({ stale: false })).toEqual(['r1']);
      expect(await ids({ stale: true, nuProposta: 7 })).toEqual(['r3']);
      // One registration: as tracking one already tracked gives it back (nothing to fill here).
      const t = { requestId: 'r2', correlationId: null, nuProposta: 8, via: 'declared' as const };
      const again = await withLog(WRITE, (log) => log.track(t, new Date(at(10 * MINUTE)), MINUTE));
      expect(again).toMatchObject({
        created: false,
        averbacao: {
          request_id: 'r2',
          nu_proposta: 8,
          status: 'queued',
          stale: 1,
          created_at: at(2 * MINUTE),
        },
      });
    });

    behaviour('replays events all or nothing, by ids or by status', async () => {
      await addEvent(store, 1, 7, 'dead');
      await addEvent(store, 2, 7, 'done');
      await addEvent(store, 3, 8, 'ignored');
      await addEvent(store, 4, 9, 'dead');
      const now = at(60 * MINUTE);
      const refused = await withLog(WRITE, (log) => log.replay({ ids: [1, 3, 99] }, now));
      expect(refused).toEqual({ queued: [], unknown: [99], notReplayable: [{ id: 3, status: 'ignored' }] });
      expect(await one('SELECT status FROM events WHERE id = ?', [1])).toBe('dead');

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

    behaviour('tracks a registration once, its first poll after the grace period', async () => {
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

    behaviour('ends every console session and records it in the audit, together', async () => {
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
      expect(Number(await one('SELECT count(*) AS n FROM console_sessions'))).toBe(0);
      expect(await one(`SELECT detail FROM console_audit WHERE action = 'end_sessions'`)).toBe('{"ended":2}');
      expect(await withLog(WRITE, (log) => log.endSessions(audit))).toBe(0);
    });

    behaviour('says when the outbox may have more, where the store can tell', async () => {
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

  /**
   * The registry poll's row updates, one text for both stores (domain/sql/registry-poll-statements.ts): the
   * poller runs them on SQLite through its repository, the poll job on PostgreSQL as they are.
   */
  describe("the registry poll's statements", () => {
    const T = (s: number) => new Date(Date.UTC(2026, 2, 1, 0, 0, s)).toISOString();
    /** Each step: what happens to the row first (a webhook's final status), then a poll. */
    const STEPS = [
      { name: 'a poll that keeps polling', before: null, attempts: 1, next: T(30), polling: true },
      { name: 'a poll with no next one', before: null, attempts: 2, next: null, polling: false },
      { name: 'a poll after another', before: null, attempts: 3, next: T(90), polling: true },
      {
        name: 'the webhook completed it meanwhile',
        before: 'completed',
        attempts: 4,
        next: T(120),
        polling: false,
      },
    ] as const;
    /** The poll's columns of the row (`stale` read as a boolean: SQLite's 0/1, PostgreSQL's boolean). */
    const row = async () => {
      const [r] = await store.all(
        `SELECT status, poll_attempts, next_poll_at, last_poll_at, last_poll_outcome, stale FROM averbacoes
         WHERE request_id = 'req-1'`,
      );
      return { ...r, stale: Boolean(r!.stale) };
    };
    const poll = (attempts: number, nextPollAt: string | null, now: string) =>
      store.poll.record('req-1', { attempts, nextPollAt, outcome: `ok:processing#${attempts}`, now });
    const setStatus = (status: string, now: string) =>
      store.exec(`UPDATE averbacoes SET status = ?, updated_at = ? WHERE request_id = 'req-1'`, [
        status,
        now,
      ]);

    behaviour('records a poll and marks stale: the rows and answers the poller expects', async () => {
      await store.exec(
        `INSERT INTO averbacoes (request_id, nu_proposta, status, tracked_via, next_poll_at, created_at, updated_at)
         VALUES ('req-1', 7, 'queued', 'declared', ?, ?, ?)`,
        [T(10), T(0), T(0)],
      );
      let expected = {
        status: 'queued',
        poll_attempts: 0,
        next_poll_at: T(10) as string | null,
        last_poll_at: null as string | null,
        last_poll_outcome: null as string | null,
        stale: false,
      };
      expect(await row()).toEqual(expected);
      for (const [i, s] of STEPS.entries()) {
        if (s.before === 'completed') {
          await setStatus('completed', T(i));
          expected.status = 'completed';
        }
        const now = T(20 * (i + 1));
        expect([s.name, await poll(s.attempts, s.next, now)]).toEqual([s.name, s.polling]);
        expected = {
          ...expected,
          poll_attempts: s.attempts,
          next_poll_at: s.polling ? s.next : null,
          last_poll_at: now,
          last_poll_outcome: `ok:processing#${s.attempts}`,
        };
        expect([s.name, await row()]).toEqual([s.name, expected]);
      }
      // Back to polling, then stale: MARK_STALE.
      await setStatus('processing', T(0));
      await store.poll.markStale('req-1', T(140));
      expected = { ...expected, status: 'processing', stale: true, next_poll_at: null };
      expect(await row()).toEqual(expected);
      // A poll that was in flight when it went stale: recorded, and polling stays off.
      expect(await poll(5, T(150), T(160))).toBe(false);
      expect(await row()).toEqual({
        ...expected,
        poll_attempts: 5,
        next_poll_at: null,
        last_poll_at: T(160),
        last_poll_outcome: 'ok:processing#5',
      });
    });
  });

  /**
   * The outbox's read-back, one statement and one mapping for both stores
   * (domain/sql/outbox-effects.ts): what an event left behind, in SQLite's shapes (numbers as
   * numbers, instants as ISO text, flags 0/1), the message bodies byte for byte.
   */
  describe("the outbox's read-back", () => {
    const event = (id: number, kind: ProcessedEvent['kind'], requestId: string | null): ProcessedEvent => ({
      id,
      kind,
      evento: kind === 'event' ? 'proposta.aprovada' : null,
      nu_proposta: kind === 'event' ? 7 : null,
      request_id: requestId,
      dedup_key: `wh_${id}`,
      received_at: at(id * MINUTE),
      payload: undefined,
    });
    const averbacao = {
      request_id: 'req-new',
      correlation_id: 'corr-1',
      nu_proposta: 7,
      status: 'completed',
      result_source: 'webhook',
      stale: 1,
      result_body: '{"status":"completed","n":1}',
      completed_at: at(3 * MINUTE),
      updated_at: at(3 * MINUTE),
    };
    const seed = async () => {
      for (const [id, kind, request] of [
        [1, 'event', null],
        [2, 'registry', 'req-new'],
        [3, 'registry', 'req-old'],
      ] as const) {
        await store.exec(
          `INSERT INTO events (id, dedup_key, kind, evento, nu_proposta, request_id, received_at, status)
           VALUES (?, ?, ?, ?, ?, ?, ?, 'done')`,
          [
            id,
            `wh-${id}`,
            kind,
            kind === 'event' ? 'proposta.aprovada' : null,
            kind === 'event' ? 7 : null,
            request,
            at(id * MINUTE),
          ],
        );
      }
      await store.exec(
        `INSERT INTO proposals (nu_proposta, uuid, nu_cpf, nu_cnpj_conveniada, vl_emprestimo, no_conveniada, stage,
           status, last_evento, first_event_id, last_event_id, created_at, updated_at)
         VALUES (7, 'u-7', '12345678909', '12345678000195', 15000.5, 'Empresa', 'analise', 'aprovada',
           'proposta.aprovada', 1, 1, ?, ?)`,
        [T0, at(MINUTE)],
      );
      await store.exec(
        `INSERT INTO proposal_transitions (nu_proposta, event_id, evento, from_status, to_status, applied, reason, at)
         VALUES (7, 1, 'proposta.aprovada', 'em_analise', 'aprovada', true, 'applied', ?)`,
        [at(MINUTE)],
      );
      await store.exec(
        `INSERT INTO averbacoes (request_id, nu_proposta, status, tracked_via, created_at, updated_at)
         VALUES ('req-old', 7, 'queued', 'started', ?, ?)`,
        [T0, T0],
      );
      await store.exec(
        `INSERT INTO averbacoes (request_id, correlation_id, nu_proposta, status, result_source, tracked_via, stale,
           result_body, result_event_id, created_at, updated_at, completed_at)
         VALUES ('req-new', 'corr-1', 7, 'completed', 'webhook', 'started', true, ?, 2, ?, ?, ?)`,
        [averbacao.result_body, at(MINUTE), averbacao.updated_at, averbacao.completed_at],
      );
    };
    const NOW = new Date(at(10 * MINUTE));
    /** The entries the pure outboxEntries gives for `effects`: bodies as stored, and who gets each. */
    const shown = (entries: readonly OutboxEntry[]) =>
      entries.map((e) => [serializeMessage(e.message), e.message.orderKey, e.destinations]);
    const expected = (effects: EventEffects) => shown(outboxEntries(effects, NOW.toISOString(), [], true));
    const none = { transition: null, proposal: null, proposalAverbacao: null, finishedAverbacao: null };

    behaviour('reads back what an event left behind, in the shapes the messages take', async () => {
      await seed();
      const e1 = event(1, 'event', null);
      expect(shown(await store.outboxOf(e1, NOW))).toEqual(
        expected({
          event: e1,
          transition: { from_status: 'em_analise', to_status: 'aprovada', applied: true, reason: 'applied' },
          proposal: {
            nu_proposta: 7,
            uuid: 'u-7',
            nu_cpf: '12345678909',
            nu_cnpj_conveniada: '12345678000195',
            vl_emprestimo: 15000.5,
            no_conveniada: 'Empresa',
            stage: 'analise',
            status: 'aprovada',
            last_evento: 'proposta.aprovada',
            created_at: T0,
            updated_at: at(MINUTE),
          },
          proposalAverbacao: averbacao,
          finishedAverbacao: null,
        }),
      );
      // A registry result that finished its registration: the proposal it is tracked for.
      const e2 = event(2, 'registry', 'req-new');
      expect(shown(await store.outboxOf(e2, NOW))).toEqual(
        expected({ ...none, event: { ...e2, nu_proposta: 7 }, finishedAverbacao: averbacao }),
      );
      // One that finished nothing (its registration was not finished by it): no message.
      expect(await store.outboxOf(event(3, 'registry', 'req-old'), NOW)).toEqual([]);
    });
  });

  /**
   * The forwarding sender's outbox (domain/forwarding/sender-store.ts `SenderStore`):
   * core/sender-queries.ts on each store's StoreSql, as the sender thread and runtime/cluster/forwarder.ts
   * build it, on the same outbox rows ({@link OUTBOX}).
   */
  describe("the forwarding sender's outbox", () => {
    const sender = () => store.sender;
    const ids = async (destination: string, now: string, limit = 10) =>
      (await sender().due(destination, now, limit)).map((d) => d.id);
    /** The deliveries' rows the sender writes, ids as numbers (PostgreSQL's bigint is a string). */
    const deliveries = async (...idList: number[]) =>
      (
        await store.all(
          `SELECT id, status, attempts, next_attempt_at, last_status, last_error, delivered_at, updated_at
           FROM forward_deliveries WHERE id IN (${idList.map(() => '?').join(', ')}) ORDER BY id`,
          idList,
        )
      ).map((r): Record<string, unknown> => ({ ...r, id: Number(r.id) }));
    const attempts = async () =>
      (
        await store.all(
          `SELECT delivery_id, attempt, started_at, duration_ms, http_status, error, outcome, answer
           FROM forward_attempts ORDER BY id`,
        )
      ).map((r): Record<string, unknown> => ({ ...r, delivery_id: Number(r.delivery_id) }));
    const attempt = (
      over: Partial<AttemptRecord> & Pick<AttemptRecord, 'deliveryId' | 'next'>,
    ): AttemptRecord => ({
      attempt: 1,
      startedAt: at(MINUTE),
      durationMs: 12.5,
      httpStatus: 200,
      error: null,
      outcome: 'delivered',
      answer: null,
      at: at(MINUTE),
      ...over,
    });

    beforeEach(async () => {
      await seedOutbox(store);
    });

    behaviour(
      'gives the due heads of lines only, per destination, in id order, up to the limit',
      async () => {
        expect(await sender().due('crm', T0, 10)).toEqual([
          { id: 1, order_key: 'p:7' },
          { id: 5, order_key: 'p:9' },
        ]);
        expect(await ids('crm', T0, 1)).toEqual([1]);
        // Due at next_attempt_at, not before.
        expect(await ids('crm', at(-1))).toEqual([]);
        expect(await ids('crm', at(5 * MINUTE))).toEqual([1, 5, 8]);
        expect(await ids('crm', at(10 * MINUTE))).toEqual([1, 3, 5, 8]);
        expect(await ids('erp', T0)).toEqual([6]);
        expect(await ids('nobody', T0)).toEqual([]);
      },
    );

    behaviour('loads deliveries with their messages, in id order, the pending ones only', async () => {
      const delivery = (id: number, destination: string, orderKey: string) => ({
        id,
        message_id: 100 + id,
        destination,
        order_key: orderKey,
        attempts: 0,
        webhook_id: `msg_${id}`,
        type: 'proposal.changed',
        body: `{"n":${id},"nu_cpf":"12345678909"}`,
        message_created_at: at((id - 60) * MINUTE),
        // The trace context each attempt's span continues (tracing).
        trace_context: traceContextOf(id),
      });
      // 4 is delivered, 7 dead: an operator's or another attempt's doing between the two reads.
      expect(await sender().dueDeliveries([6, 4, 1, 7, 2])).toEqual([
        delivery(1, 'crm', 'p:7'),
        delivery(2, 'crm', 'p:7'),
        delivery(6, 'erp', 'p:7'),
      ]);
      expect(await sender().dueDeliveries([])).toEqual([]);
      expect(await sender().dueDeliveries([999])).toEqual([]);
    });

    behaviour(
      "gives each destination's gauges in the order named, and stats' figures: the configured, then the touched by name",
      async () => {
        const read = <T>(fn: (q: StoreQuery) => Promise<T>) => store.storeSql.read(fn);
        expect(await read((q) => destinationGauges(q, ['erp', 'none', 'crm']))).toEqual([
          { destination: 'erp', pending: 1, dead: 0, oldest_pending_at: at(-54 * MINUTE), paused: 1 },
          { destination: 'none', pending: 0, dead: 0, oldest_pending_at: null, paused: 0 },
          // 1 is the oldest pending; 4 (older still) was delivered.
          { destination: 'crm', pending: 6, dead: 1, oldest_pending_at: at(-59 * MINUTE), paused: 0 },
        ]);
        expect(await read((q) => destinationGauges(q, []))).toEqual([]);
        await sender().record([], [{ name: 'acme', circuit: '{"state":"open"}', at: T0 }]);
        const figures = await read((q) => forwardingFigures(q, ['none', 'crm']));
        expect(figures.map((g) => g.destination)).toEqual(['none', 'crm', 'acme', 'erp']);
      },
    );

    behaviour('gives the earliest later next attempt of the heads of lines only', async () => {
      // 9 (a minute after T0) waits behind 1 and 2: not a head.
      expect(await sender().nextDueAt('crm', T0)).toBe(at(5 * MINUTE));
      expect(await sender().nextDueAt('crm', at(5 * MINUTE))).toBe(at(10 * MINUTE));
      expect(await sender().nextDueAt('crm', at(10 * MINUTE))).toBeNull();
      expect(await sender().nextDueAt('erp', T0)).toBeNull();
    });

    behaviour(
      'records delivered, retried and dead attempts: the next states, the attempts, the lines',
      async () => {
        await sender().record(
          [
            attempt({ deliveryId: 1, next: { status: 'delivered' }, answer: 'ok' }),
            attempt({
              deliveryId: 5,
              httpStatus: 503,
              outcome: 'temporary',
              answer: 'busy',
              next: { status: 'pending', nextAttemptAt: at(2 * MINUTE) },
            }),
            attempt({
              deliveryId: 8,
              attempt: 3,
              httpStatus: 410,
              outcome: 'permanent',
              next: { status: 'dead' },
            }),
            attempt({
              deliveryId: 3,
              httpStatus: null,
              error: 'timeout: 10000 ms',
              outcome: 'temporary',
              next: { status: 'pending', nextAttemptAt: at(20 * MINUTE) },
            }),
          ],
          [],
        );
        const done = at(MINUTE);
        expect(await deliveries(1, 3, 5, 8)).toEqual([
          {
            id: 1,
            status: 'delivered',
            attempts: 1,
            next_attempt_at: null,
            last_status: 200,
            last_error: null,
            delivered_at: done,
            updated_at: done,
          },
          {
            id: 3,
            status: 'pending',
            attempts: 1,
            next_attempt_at: at(20 * MINUTE),
            last_status: null,
            last_error: 'timeout: 10000 ms',
            delivered_at: null,
            updated_at: done,
          },
          {
            id: 5,
            status: 'pending',
            attempts: 1,
            next_attempt_at: at(2 * MINUTE),
            last_status: 503,
            last_error: 'HTTP 503',
            delivered_at: null,
            updated_at: done,
          },
          {
            id: 8,
            status: 'dead',
            attempts: 3,
            next_attempt_at: null,
            last_status: 410,
            last_error: 'HTTP 410',
            delivered_at: null,
            updated_at: done,
          },
        ]);
        const row = { attempt: 1, started_at: done, duration_ms: 12.5 };
        expect(await attempts()).toEqual([
          { ...row, delivery_id: 1, http_status: 200, error: null, outcome: 'delivered', answer: 'ok' },
          { ...row, delivery_id: 5, http_status: 503, error: null, outcome: 'temporary', answer: 'busy' },
          {
            ...row,
            delivery_id: 8,
            attempt: 3,
            http_status: 410,
            error: null,
            outcome: 'permanent',
            answer: null,
          },
          {
            ...row,
            delivery_id: 3,
            http_status: null,
            error: 'timeout: 10000 ms',
            outcome: 'temporary',
            answer: null,
          },
        ]);
        // The lines move on: 2 is p:7's head now, 5 waits for its retry, p:10 is empty.
        expect(await ids('crm', T0)).toEqual([2]);
        expect(await ids('crm', at(2 * MINUTE))).toEqual([2, 5]);
        expect(await sender().nextDueAt('crm', T0)).toBe(at(2 * MINUTE));
      },
    );

    behaviour('keeps the state of a delivery no longer pending, and stores the attempt', async () => {
      await sender().record(
        [
          attempt({
            deliveryId: 4,
            httpStatus: 503,
            outcome: 'temporary',
            next: { status: 'pending', nextAttemptAt: at(HOUR) },
          }),
          attempt({ deliveryId: 7, next: { status: 'delivered' } }),
        ],
        [],
      );
      expect(await deliveries(4, 7)).toEqual([
        {
          id: 4,
          status: 'delivered',
          attempts: 1,
          next_attempt_at: null,
          last_status: 200,
          last_error: null,
          delivered_at: at(-HOUR),
          updated_at: at(-HOUR),
        },
        {
          id: 7,
          status: 'dead',
          attempts: 1,
          next_attempt_at: null,
          last_status: 410,
          last_error: 'HTTP 410',
          delivered_at: null,
          updated_at: at(-HOUR),
        },
      ]);
      expect((await attempts()).map((a) => [a.delivery_id, a.outcome])).toEqual([
        [4, 'temporary'],
        [7, 'delivered'],
      ]);
    });

    behaviour(
      'records a batch written again (its COMMIT stored, its answer lost) once; a replayed delivery’s new attempt 1 beside its old one',
      async () => {
        const batch = [
          attempt({ deliveryId: 1, next: { status: 'delivered' }, answer: 'ok' }),
          attempt({
            deliveryId: 5,
            httpStatus: 503,
            outcome: 'temporary',
            next: { status: 'pending', nextAttemptAt: at(2 * MINUTE) },
          }),
        ];
        await sender().record(batch, []);
        const once = { attempts: await attempts(), deliveries: await deliveries(1, 5) };
        // The sender tries a failed write again, whole: the first may have been committed.
        await sender().record(batch, []);
        expect({ attempts: await attempts(), deliveries: await deliveries(1, 5) }).toEqual(once);
        // The same delivery and number at another time is another attempt (an operator's replay
        // counts from 1 again).
        await sender().record(
          [attempt({ deliveryId: 5, startedAt: at(3 * MINUTE), next: { status: 'delivered' } })],
          [],
        );
        expect((await attempts()).map((a) => [a.delivery_id, a.attempt, a.started_at])).toEqual([
          [1, 1, at(MINUTE)],
          [5, 1, at(MINUTE)],
          [5, 1, at(3 * MINUTE)],
        ]);
      },
    );

    behaviour('keeps the first 1000 characters of an error, in the attempt and in the delivery', async () => {
      const error = `network: ${'x'.repeat(1500)}`;
      await sender().record(
        [
          attempt({
            deliveryId: 1,
            httpStatus: null,
            error,
            outcome: 'temporary',
            next: { status: 'pending', nextAttemptAt: at(HOUR) },
          }),
        ],
        [],
      );
      const kept = [(await attempts())[0]!.error, (await deliveries(1))[0]!.last_error].map(String);
      // Lengths first: a failure says how long, not 1 500 characters twice.
      expect(kept.map((e) => e.length)).toEqual([1000, 1000]);
      expect(kept).toEqual([error.slice(0, 1000), error.slice(0, 1000)]);
    });

    behaviour('writes nothing of a batch one of whose writes fails', async () => {
      const good = [attempt({ deliveryId: 1, next: { status: 'delivered' } })];
      const circuit = { name: 'crm', circuit: '{"state":"open"}', at: T0 };
      // A CHECK the attempt breaks (after a good one), then a NOT NULL the circuit breaks (after
      // the attempts and the deliveries were written): each batch rejects, and leaves nothing.
      const badAttempt = attempt({
        deliveryId: 5,
        outcome: 'bogus' as AttemptRecord['outcome'],
        next: { status: 'delivered' },
      });
      // `rejects.toThrow()` is not used: better-sqlite3's native code makes its errors with the
      // SqliteError class of the first jest module registry of this worker that loaded it, so after
      // another test file they are not instances of this file's Error, and toThrow says "did not
      // throw" (seen in a full run of the tier, never alone).
      await expect(sender().record([...good, badAttempt], [circuit])).rejects.toHaveProperty(
        'message',
        expect.stringMatching(/CHECK|check/),
      );
      const badCircuit = { ...circuit, name: 'erp', at: null as unknown as string };
      await expect(sender().record(good, [circuit, badCircuit])).rejects.toHaveProperty(
        'message',
        expect.stringMatching(/NOT NULL|not-null/),
      );
      expect((await deliveries(1, 5)).map((d) => d.status)).toEqual(['pending', 'pending']);
      expect(await attempts()).toEqual([]);
      expect(await sender().destinations()).toEqual([
        { name: 'erp', paused: 1, circuit: null, updated_at: T0 },
      ]);
    });

    behaviour(
      "keeps each destination's circuit (the last of a batch) beside the operator's pause",
      async () => {
        const byName = async () =>
          (await sender().destinations()).sort((a, b) => a.name.localeCompare(b.name));
        // erp was paused by an operator (the seed).
        expect(await byName()).toEqual([{ name: 'erp', paused: 1, circuit: null, updated_at: T0 }]);
        await sender().record(
          [],
          [
            { name: 'crm', circuit: '{"state":"open","n":1}', at: at(MINUTE) },
            { name: 'crm', circuit: '{"state":"open","n":2}', at: at(2 * MINUTE) },
            { name: 'erp', circuit: '{"state":"open","n":1}', at: at(3 * MINUTE) },
          ],
        );
        expect(await byName()).toEqual([
          { name: 'crm', paused: 0, circuit: '{"state":"open","n":2}', updated_at: at(2 * MINUTE) },
          { name: 'erp', paused: 1, circuit: '{"state":"open","n":1}', updated_at: at(3 * MINUTE) },
        ]);
        // Closed again, with an attempt in the same transaction.
        await sender().record(
          [attempt({ deliveryId: 1, next: { status: 'delivered' } })],
          [{ name: 'crm', circuit: null, at: at(4 * MINUTE) }],
        );
        expect((await byName())[0]).toEqual({
          name: 'crm',
          paused: 0,
          circuit: null,
          updated_at: at(4 * MINUTE),
        });
        expect((await deliveries(1))[0]!.status).toBe('delivered');
      },
    );
  });

  /**
   * The operators' statements on the forwarding tables and the change feed (contract §8), written
   * once for both stores (core/forward-admin.ts, core/feed-reader.ts): as the admin API and the console
   * reach them (the console log's `forwards`: the replica's pool in cluster mode) and as the
   * commands do (their own connection), on the sender's outbox rows ({@link OUTBOX}).
   */
  describe('the forwarding admin and the change feed', () => {
    const admin = () => store.consoleQueries.forwards;
    const withLog = <T>(session: CommandSession, use: (log: CommandStore) => Promise<T>): Promise<T> =>
      withCommandStore(store.commands.config, session, use);
    const NOW = at(HOUR);
    /** The deliveries' rows a replay or a backfill writes, ids as numbers. */
    const rows = async (where: string, params: readonly unknown[] = []) =>
      (
        await store.all(
          `SELECT id, message_id, status, attempts, next_attempt_at, delivered_at, updated_at
           FROM forward_deliveries WHERE ${where} ORDER BY id`,
          params,
        )
      ).map((r): Record<string, unknown> => ({ ...r, id: Number(r.id), message_id: Number(r.message_id) }));
    const crm: Destination = {
      ...destinationFromEnv({ FORWARD_URL: 'https://crm.example/hook?token=abc', FORWARD_SECRET: 's' })!,
      name: 'crm',
      types: ['proposal.changed'],
    };

    beforeEach(async () => {
      await seedOutbox(store);
      await store.exec(`UPDATE forward_deliveries SET attempts = 2 WHERE id = 3`); // retrying
      // The seed wrote its ids itself: PostgreSQL's sequence goes on after them, as SQLite's rowid does.
      if (driver.name === 'PostgreSQL') await store.exec(`SELECT setval('forward_deliveries_id_seq', 9)`);
    });

    behaviour(
      'lists deliveries newest first, with the filters and the `beforeId` cursor, in the SQLite log shape',
      async () => {
        const ids = async (filter: ForwardListFilter) => (await admin().list(filter)).map((r) => r.id);
        expect(await ids({})).toEqual([9, 8, 7, 6, 5, 4, 3, 2, 1]);
        expect(await ids({ destination: 'crm', status: 'pending' })).toEqual([9, 8, 5, 3, 2, 1]);
        expect(await ids({ status: 'retrying' })).toEqual([3]);
        expect(await ids({ nuProposta: 7, type: 'proposal.changed', beforeId: 3, limit: 1 })).toEqual([2]);
        expect(await ids({ nuProposta: '7', since: at(-56 * MINUTE), until: at(-53 * MINUTE) })).toEqual([
          6, 5, 4,
        ]);
        expect(await ids({ type: 'averbacao.result' })).toEqual([]);
        const dead = {
          id: 7,
          message_id: 107,
          destination: 'crm',
          status: 'dead',
          attempts: 1,
          next_attempt_at: null,
          last_status: 410,
          last_error: 'HTTP 410',
          created_at: at(-53 * MINUTE),
          updated_at: at(-HOUR),
          delivered_at: null,
          webhook_id: 'msg_7',
          type: 'proposal.changed',
          event_id: 7,
          evento: 'proposta.criada',
          nu_proposta: 7,
          request_id: null,
          order_key: 'p:10',
          message_created_at: at(-53 * MINUTE),
        };
        expect(await admin().list({ status: 'dead' })).toEqual([dead]);
        expect(await withLog(READ, (log) => log.forwards.list({ status: 'dead' }))).toEqual([dead]);
      },
    );

    behaviour(
      'shows a delivery, its message body and its attempts in order; nothing for an unknown id',
      async () => {
        for (const [attempt, status, outcome, answer] of [
          [1, 503, 'temporary', 'busy'],
          [2, 410, 'permanent', 'gone'],
        ] as const)
          await store.exec(
            `INSERT INTO forward_attempts (delivery_id, attempt, started_at, duration_ms, http_status, error, outcome, answer)
           VALUES (7, ?, ?, 12.5, ?, NULL, ?, ?)`,
            [attempt, at(-HOUR - MINUTE * (3 - attempt)), status, outcome, answer],
          );
        const shown = await admin().show(7);
        expect(shown?.delivery).toMatchObject({ id: 7, status: 'dead', nu_proposta: 7, webhook_id: 'msg_7' });
        expect(shown?.body).toBe('{"n":7,"nu_cpf":"12345678909"}');
        expect(shown?.attempts).toEqual([
          {
            id: 1,
            attempt: 1,
            started_at: at(-HOUR - 2 * MINUTE),
            duration_ms: 12.5,
            http_status: 503,
            error: null,
            outcome: 'temporary',
            answer: 'busy',
          },
          {
            id: 2,
            attempt: 2,
            started_at: at(-HOUR - MINUTE),
            duration_ms: 12.5,
            http_status: 410,
            error: null,
            outcome: 'permanent',
            answer: 'gone',
          },
        ]);
        expect(await withLog(READ, (log) => log.forwards.show(7))).toEqual(shown);
        expect(await admin().show(99)).toBeUndefined();
      },
    );

    behaviour(
      'replays by id: dead and delivered start over, pending is due now with its attempts kept',
      async () => {
        expect(await admin().missing([3, 4, 7, 99])).toEqual([99]);
        expect(await admin().replay([3, 4, 7, 99], NOW)).toEqual({
          replayed: 3,
          by_status: { pending: 1, delivered: 1, dead: 1 },
        });
        const requeued = { status: 'pending', next_attempt_at: NOW, delivered_at: null, updated_at: NOW };
        expect(await rows('id IN (3, 4, 7)')).toEqual([
          { id: 3, message_id: 103, attempts: 2, ...requeued },
          { id: 4, message_id: 104, attempts: 0, ...requeued },
          { id: 7, message_id: 107, attempts: 0, ...requeued },
        ]);
        // The commands' connection: the same rule.
        await store.exec(`UPDATE forward_deliveries SET status = 'dead' WHERE id = 1`);
        expect(await withLog(WRITE, (log) => log.forwards.replay([1], at(2 * HOUR)))).toEqual({
          replayed: 1,
          by_status: { pending: 0, delivered: 0, dead: 1 },
        });
        expect((await rows('id = 1'))[0]).toMatchObject({ status: 'pending', next_attempt_at: at(2 * HOUR) });
      },
    );

    behaviour(
      'counts and replays what a filter matches, by the status each had, and nothing else',
      async () => {
        expect(await admin().countWhere({ nuProposta: 7 })).toEqual({
          replayed: 9,
          by_status: { pending: 7, delivered: 1, dead: 1 },
        });
        expect(await admin().countWhere({ destination: 'crm', status: 'dead' })).toEqual({
          replayed: 1,
          by_status: { pending: 0, delivered: 0, dead: 1 },
        });
        expect(
          await withLog(WRITE, (log) =>
            log.forwards.replayWhere({ destination: 'crm', status: 'dead' }, NOW),
          ),
        ).toEqual({
          replayed: 1,
          by_status: { pending: 0, delivered: 0, dead: 1 },
        });
        expect(await admin().replayWhere({ status: 'delivered' }, NOW)).toEqual({
          replayed: 1,
          by_status: { pending: 0, delivered: 1, dead: 0 },
        });
        expect(await admin().replayWhere({ destination: 'nobody' }, NOW)).toEqual({
          replayed: 0,
          by_status: { pending: 0, delivered: 0, dead: 0 },
        });
        expect((await rows(`next_attempt_at = ?`, [NOW])).map((r) => r.id)).toEqual([4, 7]);
        expect((await admin().countWhere({ status: 'pending' })).replayed).toBe(9);
      },
    );

    behaviour('backfills what a destination wants and lacks, in message order, once', async () => {
      const erp: Destination = { ...crm, name: 'erp' };
      expect(await admin().backfill(erp, {}, NOW)).toEqual({ matched: 9, created: 8 });
      const erpRows = await rows(`destination = 'erp'`);
      expect(erpRows.map((r) => r.message_id)).toEqual([106, 101, 102, 103, 104, 105, 107, 108, 109]);
      expect(
        erpRows
          .slice(1)
          .every((r) => r.status === 'pending' && r.attempts === 0 && r.next_attempt_at === NOW),
      ).toBe(true);
      expect(await withLog(WRITE, (log) => log.forwards.backfill(erp, {}, NOW))).toEqual({
        matched: 9,
        created: 0,
      });
      // A range: one proposal, a time window; a destination that wants none of them gets none.
      const late: Destination = { ...crm, name: 'late' };
      const range = { nuProposta: 7, since: at(-55 * MINUTE), until: at(-53 * MINUTE) };
      expect(await admin().backfill(late, range, NOW)).toEqual({ matched: 2, created: 2 });
      expect((await rows(`destination = 'late'`)).map((r) => r.message_id)).toEqual([105, 106]);
      expect(await admin().backfill({ ...late, types: ['averbacao.result'] }, {}, NOW)).toEqual({
        matched: 0,
        created: 0,
      });
    });

    behaviour(
      'pauses and resumes a destination, and sums each one up: counts, head of the queue, pause, circuit',
      async () => {
        await admin().setPaused('crm', true, at(MINUTE));
        const circuit = { state: 'open', since: 1, until: 2, failures: 5 };
        await store.exec(`UPDATE forward_destinations SET circuit = ? WHERE name = 'crm'`, [
          JSON.stringify(circuit),
        ]);
        const summaries = await admin().destinationSummaries([crm]);
        expect(summaries).toEqual([
          {
            name: 'crm',
            configured: true,
            url: 'https://crm.example/hook?…',
            types: ['proposal.changed'],
            eventos: ['*'],
            has_filter: false,
            full_cpf: false,
            paused: true,
            paused_in_config: false,
            paused_by_operator: true,
            counts: { pending: 6, retrying: 1, delivered: 1, dead: 1 },
            oldest_pending_at: at(-59 * MINUTE),
            circuit,
          },
          {
            name: 'erp',
            configured: false,
            url: null,
            types: null,
            eventos: null,
            has_filter: null,
            full_cpf: null,
            paused: true,
            paused_in_config: false,
            paused_by_operator: true,
            counts: { pending: 1, retrying: 0, delivered: 0, dead: 0 },
            oldest_pending_at: at(-54 * MINUTE),
            circuit: { state: 'closed', failures: 0 },
          },
        ]);
        expect(await withLog(READ, (log) => log.forwards.destinationSummaries([crm]))).toEqual(summaries);
        await withLog(WRITE, (log) => log.forwards.setPaused('crm', false, at(2 * MINUTE)));
        const [resumed] = await admin().destinationSummaries([crm]);
        expect(resumed).toMatchObject({ paused: false, paused_by_operator: false, circuit });
        expect(await store.all(`SELECT updated_at FROM forward_destinations WHERE name = 'crm'`)).toEqual([
          { updated_at: at(2 * MINUTE) },
        ]);
      },
    );

    behaviour(
      'serves the change feed in id order, by type; its cursor past what it read, or the newest message',
      async () => {
        await addEvent(store, 10, 8, 'done');
        await store.exec(
          `INSERT INTO forward_messages (id, webhook_id, type, event_id, evento, nu_proposta, request_id, order_key, created_at, body)
         VALUES (110, 'msg_10', 'averbacao.result', 10, NULL, 8, 'req-1', 'r:req-1', ?, '{"n":10}')`,
          [T0],
        );
        const page = (afterId: number, limit: number, types?: MessageType[]) =>
          withLog({ access: 'follow' }, async (log) => {
            const { messages, lastId } = await log.feed(afterId, limit, types ?? FEED_DEFAULT_TYPES);
            return { ids: messages.map((m) => m.id), lastId };
          });
        expect(await page(0, 4, ['proposal.changed'])).toEqual({ ids: [101, 102, 103, 104], lastId: 104 });
        expect(await page(104, 10, ['proposal.changed'])).toEqual({
          ids: [105, 106, 107, 108, 109],
          lastId: 110,
        });
        expect(await page(0, 10, ['averbacao.result'])).toEqual({ ids: [110], lastId: 110 });
        expect(await page(108, 2)).toEqual({ ids: [109, 110], lastId: 110 });
        expect(await page(110, 10)).toEqual({ ids: [], lastId: 110 });
        const [first] = (await withLog(READ, (log) => log.feed(0, 1, ['proposal.changed']))).messages;
        expect(first).toEqual({ id: 101, body: '{"n":1,"nu_cpf":"12345678909"}' });
      },
    );

    behaviour('wakes the sender when a write gives it work, where the store can tell', async () => {
      if (store.notify === null) return; // SQLite: an in-process nudge, counted by the HTTP tests
      await withLog({ access: 'follow' }, async (log) => {
        let heard = 0;
        await log.listen(() => (heard += 1));
        const heardBy = async (write: () => Promise<unknown>) => {
          const before = heard;
          await write();
          await log.feed(0, 1, FEED_DEFAULT_TYPES); // a round trip: the notification arrives first
          return heard > before;
        };
        expect(await heardBy(() => admin().replay([7], NOW))).toBe(true);
        expect(await heardBy(() => admin().replay([99], NOW))).toBe(false);
        expect(await heardBy(() => admin().setPaused('crm', false, NOW))).toBe(true);
        expect(await heardBy(() => admin().setPaused('crm', true, NOW))).toBe(false);
        expect(await heardBy(() => admin().backfill({ ...crm, name: 'late' }, {}, NOW))).toBe(true);
      });
    });
  });

  /**
   * RETENTION_DAYS and `prune` (core/prune-pass.ts, written once for both stores): what a pass removes
   * and keeps, its batches, and the command. Events are stored in arrival order here (ids follow
   * `received_at`), as SQLite mode stores them; PostgreSQL's walk of old rows behind newer ids is
   * test/integration/cluster-retention.test.ts's.
   */
  /**
   * Processing (issue 33): the same deliveries through each store give the same transitions,
   * outbox messages, retries, dead letters and handler calls. The event step is written once
   * (core/event-step.ts); what runs it is each store's (SQLite mode's pipeline, cluster mode's turns).
   */
  describe('processing', () => {
    const T = new Date(T0);
    const after = (ms: number) => new Date(T.getTime() + ms);
    /** A life-cycle delivery `wh-<n>` of proposal `nu`, received `n` seconds after T0. */
    const lifecycle = (n: number, evento: string, nu: number, dados: Record<string, unknown> = {}) =>
      store.processing.store({
        kind: 'event',
        evento,
        nu,
        requestId: typeof dados.requestId === 'string' ? dados.requestId : null,
        registryStatus: null,
        dedupKey: `wh-${n}`,
        receivedAt: at(n * 1000),
        body: JSON.stringify(delivery(evento, { nu_proposta: nu, webhook_id: `wh-${n}`, dados })),
      });
    const registry = (n: number, requestId: string, status: string) =>
      store.processing.store({
        kind: 'registry',
        evento: null,
        nu: null,
        requestId,
        registryStatus: status,
        dedupKey: `wh-${n}`,
        receivedAt: at(n * 1000),
        body: JSON.stringify({ requestId, status, correlationId: `corr-${requestId}` }),
      });
    const transitions = () =>
      store.all(
        `SELECT e.dedup_key AS event, t.evento, t.from_status, t.to_status,
           CASE WHEN t.applied THEN 1 ELSE 0 END AS applied, t.reason
         FROM proposal_transitions t JOIN events e ON e.id = t.event_id ORDER BY e.dedup_key`,
      );
    const events = () =>
      store.all(
        'SELECT dedup_key, status, attempts, next_attempt_at, last_error, processed_at FROM events ORDER BY dedup_key',
      );
    const messages = () =>
      store.all(
        `SELECT e.dedup_key AS event, m.type FROM forward_messages m JOIN events e ON e.id = m.event_id
         ORDER BY e.dedup_key, m.type`,
      );
    const proposals = () =>
      store.all('SELECT nu_proposta, status, last_evento FROM proposals ORDER BY nu_proposta');
    /** A partner's table, written through `ctx.sql` (created by the first case on PostgreSQL, emptied by each). */
    const partnerTable = async () => {
      await store.exec(
        'CREATE TABLE IF NOT EXISTS partner_notes (event_id bigint, evento text, seen_status text)',
      );
      await store.exec('DELETE FROM partner_notes');
    };
    const notes = () => store.all('SELECT evento, seen_status FROM partner_notes ORDER BY event_id');

    behaviour(
      "a proposal's events: each recorded once, in order, the proposal moved, done, and their messages stored",
      async () => {
        await lifecycle(1, 'proposta.criada', 41);
        await lifecycle(2, 'proposta.pre_aprovada', 41);
        await lifecycle(3, 'proposta.criada', 42);
        await lifecycle(4, 'proposta.aprovada', 41);
        await lifecycle(5, 'proposta.pre_aprovada', 41); // late: after aprovada
        const report = await store.processing.run(T);
        expect(report.processed.sort()).toEqual(
          [
            ['proposta.aprovada', 'done'],
            ['proposta.criada', 'done'],
            ['proposta.criada', 'done'],
            ['proposta.pre_aprovada', 'done'],
            ['proposta.pre_aprovada', 'done'],
          ].sort(),
        );
        expect(report.errors).toEqual([]);
        expect(await transitions()).toEqual([
          {
            event: 'wh-1',
            evento: 'proposta.criada',
            from_status: null,
            to_status: 'em_analise',
            applied: 1,
            reason: 'created',
          },
          {
            event: 'wh-2',
            evento: 'proposta.pre_aprovada',
            from_status: 'em_analise',
            to_status: 'pre_aprovada',
            applied: 1,
            reason: 'forward',
          },
          {
            event: 'wh-3',
            evento: 'proposta.criada',
            from_status: null,
            to_status: 'em_analise',
            applied: 1,
            reason: 'created',
          },
          {
            event: 'wh-4',
            evento: 'proposta.aprovada',
            from_status: 'pre_aprovada',
            to_status: 'aprovada',
            applied: 1,
            reason: 'forward',
          },
          {
            event: 'wh-5',
            evento: 'proposta.pre_aprovada',
            from_status: 'aprovada',
            to_status: 'pre_aprovada',
            applied: 0,
            reason: 'late',
          },
        ]);
        expect(await proposals()).toEqual(
          [
            { nu_proposta: 41, status: 'aprovada', last_evento: 'proposta.aprovada' },
            { nu_proposta: 42, status: 'em_analise', last_evento: 'proposta.criada' },
          ].map((p) => (driver.name === 'SQLite' ? p : { ...p, nu_proposta: String(p.nu_proposta) })),
        );
        expect((await events()).map((e) => [e.dedup_key, e.status, e.attempts, e.processed_at])).toEqual(
          [1, 2, 3, 4, 5].map((n) => [`wh-${n}`, 'done', 1, T0]),
        );
        // The change feed's messages (feed on, no destination): one per event, the late one's too.
        expect(await messages()).toEqual(
          [1, 2, 3, 4, 5].map((n) => ({ event: `wh-${n}`, type: 'proposal.changed' })),
        );
        // Processed again (a replay): nothing changes, nothing is stored twice.
        await store.exec("UPDATE events SET status = 'pending', attempts = 0, processed_at = NULL");
        await store.processing.run(after(1000));
        expect(await transitions()).toHaveLength(5);
        expect(await messages()).toHaveLength(5);
        expect(await proposals()).toHaveLength(2);
      },
    );

    behaviour(
      'a registration: tracked from the event that names it, completed by its registry result',
      async () => {
        await lifecycle(1, 'averbacao.solicitada', 43, { requestId: 'req-43' });
        await registry(2, 'req-43', 'completed');
        const report = await store.processing.run(T);
        expect(report.processed.sort()).toEqual([
          ['averbacao.solicitada', 'done'],
          ['registry', 'done'],
        ]);
        const [averbacao] = await store.all(
          'SELECT request_id, correlation_id, status, result_source, tracked_via, completed_at FROM averbacoes',
        );
        expect(averbacao).toEqual({
          request_id: 'req-43',
          correlation_id: 'corr-req-43',
          status: 'completed',
          result_source: 'webhook',
          tracked_via: 'event',
          completed_at: T0,
        });
        expect((await messages()).map((m) => `${m.event} ${m.type}`)).toContain('wh-2 averbacao.result');
      },
    );

    behaviour(
      "a partner's handlers: named before onAny, once per event, after the built-ins and inside the event's transaction",
      async () => {
        await partnerTable();
        const calls: string[] = [];
        const seen: HandlerEvent[] = [];
        const handlers = new HandlerRouter()
          .on('proposta.criada', async (event, ctx) => {
            calls.push(`named ${event.evento}`);
            const { rows } = await ctx.sql.query<{ status: string }>(
              'SELECT status FROM proposals WHERE nu_proposta = $1',
              [String(event.nuProposta)],
            );
            await ctx.sql.query(
              'INSERT INTO partner_notes (event_id, evento, seen_status) VALUES ($1, $2, $3)',
              [event.id, event.evento, rows[0]?.status ?? null],
            );
          })
          .onAny(async (event) => {
            calls.push(`any ${event.evento ?? event.kind}`);
            seen.push(event);
          });
        await lifecycle(1, 'proposta.criada', 44);
        await lifecycle(2, 'proposta.pre_aprovada', 44);
        const report = await store.processing.run(T, handlers);
        expect(report.processed).toEqual([
          ['proposta.criada', 'done'],
          ['proposta.pre_aprovada', 'done'],
        ]);
        expect(calls).toEqual(['named proposta.criada', 'any proposta.criada', 'any proposta.pre_aprovada']);
        expect(await notes()).toEqual([{ evento: 'proposta.criada', seen_status: 'em_analise' }]);
        // The event as each store hands it over: the same shape and values (but its id).
        expect(seen.map(({ id: _id, ...e }) => e)[0]).toEqual({
          kind: 'event',
          evento: 'proposta.criada',
          nuProposta: 44,
          requestId: null,
          registryStatus: null,
          webhookId: 'wh-1',
          dedupKey: 'wh-1',
          tentativa: null,
          receivedAt: at(1000),
          attempts: 0,
          rawBody: expect.stringContaining('"webhook_id":"wh-1"'),
          payload: expect.objectContaining({ evento: 'proposta.criada' }),
          dados: expect.objectContaining({ nu_proposta: 44 }),
        });
      },
    );

    behaviour(
      "a handler that throws: the event's writes roll back, it retries after its backoff, then is dead; its proposal waits, others go on",
      async () => {
        await partnerTable();
        const calls: string[] = [];
        const told: string[] = [];
        let failures = 2;
        const handlers = new HandlerRouter()
          .on('proposta.pre_aprovada', async (event, ctx) => {
            calls.push(event.evento ?? '');
            await ctx.sql.query('INSERT INTO partner_notes (event_id, evento) VALUES ($1, $2)', [
              event.id,
              event.evento,
            ]);
            if (failures-- > 0) throw new Error(`refused ${failures}`);
          })
          .on('proposta.aprovada', async () => {
            throw new Error('always');
          })
          .onError((err) => void told.push(err.message));
        await lifecycle(1, 'proposta.criada', 45);
        await lifecycle(2, 'proposta.pre_aprovada', 45);
        await lifecycle(3, 'proposta.aprovada', 45);
        await lifecycle(4, 'proposta.criada', 46);
        await lifecycle(5, 'proposta.aprovada', 47);
        const first = await store.processing.run(T, handlers);
        expect(first.processed.sort()).toEqual(
          [
            ['proposta.criada', 'done'],
            ['proposta.criada', 'done'],
            ['proposta.pre_aprovada', 'retry'],
            ['proposta.aprovada', 'retry'],
          ].sort(),
        );
        expect(first.errors.sort()).toEqual(['always', 'refused 1']);
        expect(told.sort()).toEqual(['always', 'refused 1']);
        expect(
          first.log.filter((l) => l.level !== 'info').map((l) => [l.level, l.message, l.fields.attempts]),
        ).toEqual(
          expect.arrayContaining([
            ['warn', 'handler failed: will retry', 1],
            ['warn', 'handler failed: will retry', 1],
          ]),
        );
        // Backoff 1 s, its jitter at random 0.5: 750 ms (domain/backoff.ts).
        const retryAt = after(750).toISOString();
        expect(
          (await events()).map((e) => [e.dedup_key, e.status, e.attempts, e.next_attempt_at, e.last_error]),
        ).toEqual([
          ['wh-1', 'done', 1, null, null],
          ['wh-2', 'failed', 1, retryAt, 'refused 1'],
          ['wh-3', 'pending', 0, null, null],
          ['wh-4', 'done', 1, null, null],
          ['wh-5', 'failed', 1, retryAt, 'always'],
        ]);
        // Rolled back with the handler's own write: the event's transition.
        expect((await transitions()).map((t) => t.event)).toEqual(['wh-1', 'wh-4']);
        expect(await notes()).toEqual([]);

        // Its retry, due: it throws again; then succeeds, and its proposal moves on.
        await store.processing.run(after(1000), handlers);
        expect((await events()).map((e) => [e.dedup_key, e.status, e.attempts])).toEqual([
          ['wh-1', 'done', 1],
          ['wh-2', 'failed', 2],
          ['wh-3', 'pending', 0],
          ['wh-4', 'done', 1],
          ['wh-5', 'failed', 2],
        ]);
        const last = await store.processing.run(after(3000), handlers);
        expect(last.processed.sort()).toEqual(
          [
            ['proposta.pre_aprovada', 'done'],
            ['proposta.aprovada', 'retry'],
            ['proposta.aprovada', 'dead'],
          ].sort(),
        );
        expect(
          last.log
            .filter((l) => l.level === 'error')
            .map((l) => [l.message, l.fields.event_id !== undefined]),
        ).toEqual([['handler failed for the last time: event is dead (replayable)', true]]);
        const end = after(3000).toISOString();
        expect(
          (await events()).map((e) => [e.dedup_key, e.status, e.attempts, e.next_attempt_at, e.processed_at]),
        ).toEqual([
          ['wh-1', 'done', 1, null, T0],
          ['wh-2', 'done', 3, null, end],
          ['wh-3', 'failed', 1, after(3750).toISOString(), null],
          ['wh-4', 'done', 1, null, T0],
          ['wh-5', 'dead', 3, null, end],
        ]);
        expect(calls).toEqual(['proposta.pre_aprovada', 'proposta.pre_aprovada', 'proposta.pre_aprovada']);
        expect(await notes()).toEqual([{ evento: 'proposta.pre_aprovada', seen_status: null }]);
        expect((await transitions()).map((t) => t.event)).toEqual(['wh-1', 'wh-2', 'wh-4']);
        // A dead letter's messages: none (its effects rolled back).
        expect((await messages()).filter((m) => m.event === 'wh-5')).toEqual([]);
      },
    );
  });

  describe('retention', () => {
    const CUTOFF = new Date(T0);
    const NOW = new Date(Date.parse(T0) + 30 * 24 * HOUR);
    /** [key, status, received_at, has a body]: in arrival order. */
    const EVENTS: [string, string, string, boolean][] = [
      ...EVENT_STATUSES.map((status): [string, string, string, boolean] => [
        `old-${status}`,
        status,
        at(-HOUR),
        true,
      ]),
      ['old-done-no-body', 'done', at(-HOUR), false],
      ['a-ms-before', 'done', at(-1), true],
      ['at-the-cutoff', 'done', T0, true],
      ['recent-done', 'done', at(HOUR), true],
    ];
    const PRUNED = ['a-ms-before', 'old-done', 'old-ignored', 'old-invalid'];
    const seedEvents = async () => {
      for (const [i, [key, status, receivedAt, body]] of EVENTS.entries())
        await store.exec(
          `INSERT INTO events (id, dedup_key, kind, evento, received_at, body, body_bytes, status)
           VALUES (?, ?, 'event', 'proposta.criada', ?, ?, ?, ?)`,
          [i + 1, key, receivedAt, body ? Buffer.from(`{"key":"${key}"}`) : null, body ? 20 : 0, status],
        );
    };
    /** The keys whose body a pass removed (body gone, the time it went recorded), and when. */
    const bodiesGone = async () =>
      (
        await store.all(
          'SELECT dedup_key, body_pruned_at FROM events WHERE body IS NULL AND body_pruned_at IS NOT NULL ORDER BY dedup_key',
        )
      ).map((r) => `${String(r.dedup_key)}@${String(r.body_pruned_at)}`);
    const prunedAtNow = (keys: readonly string[]) => keys.map((k) => `${k}@${NOW.toISOString()}`);
    const count = async (table: string) =>
      Number(Object.values((await store.all(`SELECT count(*) AS n FROM ${table}`))[0]!)[0]);

    behaviour(
      'removes the bodies of finished events received before the cutoff, keeping rows and every other body',
      async () => {
        await seedEvents();
        const removed = await pruneBodies(store.storeSql, CUTOFF, NOW);
        expect(removed.pruned).toBe(PRUNED.length);
        expect(await bodiesGone()).toEqual(prunedAtNow(PRUNED));
        // Rows and dedup keys stay; the bodies kept are whole.
        expect(await count('events')).toBe(EVENTS.length);
        const kept = await store.all(
          'SELECT dedup_key FROM events WHERE body IS NOT NULL ORDER BY dedup_key',
        );
        expect(kept.map((r) => r.dedup_key)).toEqual(
          EVENTS.filter(([key, , , body]) => body && !PRUNED.includes(key))
            .map(([key]) => key)
            .sort(),
        );
        // The next pass finds nothing.
        expect((await pruneBodies(store.storeSql, CUTOFF, NOW)).pruned).toBe(0);
      },
    );

    behaviour('removes the same in batches of any size, one report per batch', async () => {
      await seedEvents();
      const reports: BatchReport[] = [];
      const removed = await pruneBodies(store.storeSql, CUTOFF, NOW, {
        bodyBatch: 2,
        onBatch: (b) => reports.push(b),
      });
      expect(removed.pruned).toBe(PRUNED.length);
      expect(await bodiesGone()).toEqual(prunedAtNow(PRUNED));
      expect(reports.every((r) => r.kind === 'bodies')).toBe(true);
      expect(reports.reduce((n, r) => n + r.rows, 0)).toBe(PRUNED.length);
      // Pairs of events, oldest first: old pending and done, failed and dead, ignored and invalid, …
      expect(reports.map((r) => r.rows).slice(0, 3)).toEqual([1, 0, 2]);
    });

    behaviour('stopped between batches, keeps what it committed; the next pass finishes', async () => {
      await seedEvents();
      let batches = 0;
      await expect(
        pruneBodies(store.storeSql, CUTOFF, NOW, {
          bodyBatch: 2,
          shouldStop: () => batches > 0,
          onBatch: () => void (batches += 1),
        }),
      ).rejects.toBeInstanceOf(PassInterrupted);
      expect(await bodiesGone()).toEqual(prunedAtNow(['old-done']));
      expect((await pruneBodies(store.storeSql, CUTOFF, NOW, { bodyBatch: 2 })).pruned).toBe(
        PRUNED.length - 1,
      );
      expect(await bodiesGone()).toEqual(prunedAtNow(PRUNED));
    });

    /** [name, created_at, its deliveries' statuses]; gone: what a pass removes. */
    const MESSAGES: [string, string, string[]][] = [
      ['old-delivered-everywhere', at(-HOUR), ['delivered', 'delivered']],
      ['old-dead-at-one', at(-HOUR), ['delivered', 'dead']],
      ['old-pending-at-one', at(-HOUR), ['pending', 'delivered']],
      ['old-to-no-destination', at(-HOUR), []],
      ['old-delivered-at-its-one', at(-1), ['delivered']],
      ['at-the-cutoff-delivered', T0, ['delivered']],
      ['recent-delivered', at(HOUR), ['delivered']],
    ];
    const GONE = ['old-delivered-everywhere', 'old-to-no-destination', 'old-delivered-at-its-one'];
    const seedMessages = async () => {
      let delivery = 0;
      for (const [i, [name, createdAt, statuses]] of MESSAGES.entries()) {
        const id = i + 1;
        // Its event, without a body, after the events of the bodies' cases.
        await store.exec(
          `INSERT INTO events (id, dedup_key, kind, evento, received_at, status) VALUES (?, ?, 'event', 'proposta.criada', ?, 'done')`,
          [100 + id, `msg-${id}`, createdAt],
        );
        await store.exec(
          `INSERT INTO forward_messages (id, webhook_id, type, event_id, evento, order_key, created_at, body)
           VALUES (?, ?, 'event.received', ?, 'proposta.criada', ?, ?, '{}')`,
          [id, name, 100 + id, `e:${id}`, createdAt],
        );
        for (const [d, status] of statuses.entries()) {
          delivery += 1;
          await store.exec(
            `INSERT INTO forward_deliveries (id, message_id, destination, order_key, status, attempts, created_at, updated_at)
             VALUES (?, ?, ?, ?, ?, 1, ?, ?)`,
            [delivery, id, `dest${d}`, `e:${id}`, status, createdAt, createdAt],
          );
          await store.exec(
            `INSERT INTO forward_attempts (delivery_id, attempt, started_at, duration_ms, outcome) VALUES (?, 1, ?, 1, ?)`,
            [delivery, createdAt, status === 'delivered' ? 'delivered' : 'temporary'],
          );
        }
      }
    };
    const messagesLeft = async () =>
      (await store.all('SELECT webhook_id FROM forward_messages ORDER BY id')).map((r) => r.webhook_id);
    const KEPT = MESSAGES.map(([name]) => name).filter((name) => !GONE.includes(name));
    const keptDeliveries = MESSAGES.filter(([name]) => KEPT.includes(name)).reduce(
      (n, [, , statuses]) => n + statuses.length,
      0,
    );

    for (const messageBatch of [1, 2, undefined])
      behaviour(
        `removes old messages delivered everywhere with their deliveries and attempts, keeps the rest whole (batches of ${messageBatch ?? 'the default'})`,
        async () => {
          await seedMessages();
          const removed = await pruneForwarded(store.storeSql, CUTOFF, { messageBatch });
          expect(removed.pruned).toBe(GONE.length);
          expect(await messagesLeft()).toEqual(KEPT);
          expect(await count('forward_deliveries')).toBe(keptDeliveries);
          expect(await count('forward_attempts')).toBe(keptDeliveries);
          expect((await pruneForwarded(store.storeSql, CUTOFF, { messageBatch })).pruned).toBe(0);
        },
      );

    behaviour('`prune`: bodies, then messages, in the summary both modes print', async () => {
      await seedEvents();
      await seedMessages();
      const outcome = await withCommandStore(
        store.commands.config,
        { access: 'write', command: 'prune' },
        (log) => log.prune(CUTOFF, NOW),
      );
      expect(outcome.summary).toEqual({
        pruned: PRUNED.length,
        forwarded: GONE.length,
        anonymised: 0,
        cutoff: T0,
      });
      expect(await messagesLeft()).toEqual(KEPT);
    });

    behaviour(
      'removes the personal data of proposals final since before the cutoff, keeps the rest (issue 45)',
      async () => {
        const old = new Date(CUTOFF.getTime() - 3_600_000).toISOString();
        const recent = new Date(CUTOFF.getTime() + 3_600_000).toISOString();
        const proposals: [number, string, string][] = [
          [1, 'paga', old],
          [2, 'negada', old],
          [3, 'aprovada', old],
          [4, 'paga', recent],
        ];
        for (const [nu, status, at] of proposals)
          await store.exec(
            `INSERT INTO proposals (nu_proposta, uuid, nu_cpf, nu_cnpj_conveniada, vl_emprestimo, no_conveniada, stage,
               status, created_at, updated_at) VALUES (?, 'u', '52998224725', '11222333000181', 1000, 'Empresa', 'Pagamento', ?, ?, ?)`,
            [nu, status, at, at],
          );
        const summary = await prunePass(store.storeSql, CUTOFF, NOW);
        expect(summary.anonymised).toBe(2);
        const rows = await store.all(
          'SELECT nu_proposta, nu_cpf, nu_cnpj_conveniada, no_conveniada, vl_emprestimo, uuid, personal_erased_at, erasure_id FROM proposals ORDER BY nu_proposta',
        );
        const erased = {
          nu_cpf: null,
          nu_cnpj_conveniada: null,
          no_conveniada: null,
          uuid: 'u',
          erasure_id: null,
        };
        const kept = {
          nu_cpf: '52998224725',
          nu_cnpj_conveniada: '11222333000181',
          no_conveniada: 'Empresa',
          personal_erased_at: null,
        };
        expect(rows[0]).toMatchObject(erased);
        expect(rows[1]).toMatchObject(erased);
        expect(rows[0]!.personal_erased_at).not.toBeNull();
        // Amounts are the legal hold's (PostgreSQL's numeric reads as text here).
        expect(rows.map((r) => Number(r.vl_emprestimo))).toEqual([1000, 1000, 1000, 1000]);
        expect(rows[2]).toMatchObject(kept);
        expect(rows[3]).toMatchObject(kept);
        expect((await prunePass(store.storeSql, CUTOFF, NOW)).anonymised).toBe(0);
      },
    );
  });

  /** The people in the data (issue 45): the subject index, find, erase, and the ledger of sharing. */
  describe('subjects', () => {
    const T = new Date(T0);
    /** Person A (found, then erased) and person B (never touched); both CPFs valid. */
    const A = '52998224725';
    const A_FORMATTED = '529.982.247-25';
    const B = '11144477735';
    const ERASURE = 'era_AAECAwQFBgcICQoLDA0ODw';
    const ERASED_AT = new Date(at(2 * HOUR));
    const withLog = <T>(use: (log: CommandStore) => Promise<T>): Promise<T> =>
      withCommandStore(store.commands.config, WRITE, use);
    /** A life-cycle delivery `wh-<n>` of proposal `nu`, for the person of `cpf`. */
    const lifecycle = (
      n: number,
      evento: string,
      nu: number,
      cpf: string,
      dados: Record<string, unknown> = {},
    ) =>
      store.processing.store({
        kind: 'event',
        evento,
        nu,
        requestId: typeof dados.requestId === 'string' ? dados.requestId : null,
        registryStatus: null,
        dedupKey: `wh-${n}`,
        receivedAt: at(n * 1000),
        body: JSON.stringify(
          delivery(evento, {
            nu_proposta: nu,
            webhook_id: `wh-${n}`,
            dados: {
              nu_cpf: cpf,
              nu_cnpj_conveniada: '12345678000195',
              no_conveniada: `Empregador ${nu}`,
              ...dados,
            },
          }),
        ),
      });
    /** Every row of `table`, each value as text (bytes as UTF-8 and as Latin-1), for a scan. */
    const textOf = async (table: string) =>
      (await store.all(`SELECT * FROM ${table}`))
        .flatMap((row) => Object.values(row))
        .map((v) => (Buffer.isBuffer(v) ? `${v.toString('utf8')} ${v.toString('latin1')}` : String(v)))
        .join('\n');
    const SCANNED = [
      'events',
      'forward_messages',
      'forward_deliveries',
      'forward_attempts',
      'averbacoes',
      'proposals',
      'proposal_transitions',
      'console_audit',
      'sharing_ledger',
      'erasures',
    ];
    /** The tables that still write `cpf` in full, in either of its forms. */
    const holdingCpf = async (cpf: string) => {
      const formatted = `${cpf.slice(0, 3)}.${cpf.slice(3, 6)}.${cpf.slice(6, 9)}-${cpf.slice(9)}`;
      const found: string[] = [];
      for (const table of SCANNED) {
        const text = await textOf(table);
        if (text.includes(cpf) || text.includes(formatted)) found.push(table);
      }
      return found;
    };
    /** What `find` gave, as text: bodies (PostgreSQL's bytes) as their text. */
    const asText = (found: SubjectHoldings) =>
      JSON.stringify({
        ...found,
        events: found.events.map((e) => ({
          ...e,
          body: Buffer.isBuffer(e.body) ? e.body.toString('latin1') : e.body,
        })),
      });
    const idOf = async (dedupKey: string) =>
      Number((await store.all('SELECT id FROM events WHERE dedup_key = ?', [dedupKey]))[0]!.id);

    /**
     * A's proposals 41 and 43 (43's CPF formatted), a registration req-41 with its registry result
     * (the CPF in its body), a body quarantined as not JSON that names A only in its text, and an
     * event of 41 whose body retention removed; B's proposal 42. All processed (feed on: a message
     * per event), then each message queued for `crm`, B's for `erp` too, A's first for `bi`; every
     * `crm` and `erp` delivery attempted through the sender (the ledger), `bi`'s never.
     */
    const seedPeople = async () => {
      await lifecycle(1, 'proposta.criada', 41, A);
      await lifecycle(2, 'proposta.pre_aprovada', 41, A);
      await lifecycle(3, 'averbacao.solicitada', 41, A, { requestId: 'req-41' });
      await store.processing.store({
        kind: 'registry',
        evento: null,
        nu: null,
        requestId: 'req-41',
        registryStatus: 'completed',
        dedupKey: 'wh-4',
        receivedAt: at(4000),
        body: JSON.stringify({ requestId: 'req-41', status: 'completed', correlationId: 'c-41', cpf: A }),
      });
      await lifecycle(5, 'proposta.criada', 43, A_FORMATTED);
      await lifecycle(6, 'proposta.criada', 42, B, { obs: 'B' });
      const report = await store.processing.run(T);
      expect(report.errors).toEqual([]);
      await store.exec(
        `INSERT INTO events (dedup_key, kind, received_at, body, body_bytes, status, last_error)
         VALUES ('bad-1', 'event', ?, ?, 40, 'invalid', 'not JSON')`,
        [at(7000), Buffer.from(`{"dados": {"nu_cpf": "${A_FORMATTED}" garbled`)],
      );
      await store.exec(`UPDATE events SET body = NULL, body_pruned_at = ? WHERE dedup_key = 'wh-2'`, [
        at(HOUR),
      ]);
      const messages = await store.all(
        'SELECT id, nu_proposta, request_id, order_key FROM forward_messages ORDER BY id',
      );
      const queued: [number, string][] = [];
      for (const [i, m] of messages.entries()) {
        const destinations = [
          'crm',
          ...(String(m.nu_proposta) === '42' ? ['erp'] : []),
          ...(i === 0 ? ['bi'] : []),
        ];
        for (const destination of destinations) {
          await store.exec(
            `INSERT INTO forward_deliveries (message_id, destination, order_key, status, attempts, next_attempt_at,
               created_at, updated_at)
             VALUES (?, ?, ?, 'pending', 0, ?, ?, ?)`,
            [m.id, destination, m.order_key, T0, T0, T0],
          );
          queued.push([Number(m.id), destination]);
        }
      }
      const deliveries = await store.all(
        `SELECT id, message_id, destination FROM forward_deliveries WHERE destination <> 'bi' ORDER BY id`,
      );
      await store.sender.record(
        deliveries.map((d, i) => ({
          deliveryId: Number(d.id),
          attempt: 1,
          startedAt: at(MINUTE),
          durationMs: 5,
          httpStatus: 200,
          error: null,
          outcome: 'delivered' as const,
          // A destination that echoes the CPF in its answer (kept: its first KB).
          answer: i === 0 ? `{"ok":true,"cpf":"${A}"}` : 'ok',
          next: { status: 'delivered' as const },
          at: at(MINUTE),
        })),
        [],
      );
      // An operator's search for A, audited in full (`report --full-cpf`), and one for nobody.
      for (const [target, detail] of [
        [`proposals?cpf=${A}`, `{"cpf":"${A_FORMATTED}","rows":2}`],
        ['proposals?status=aprovada', '{"rows":1}'],
      ])
        await store.exec(
          `INSERT INTO console_audit (at, role, session, action, target, detail) VALUES (?, 'admin', 's1', 'replay_bulk', ?, ?)`,
          [at(MINUTE), target, detail],
        );
      return withLog(async (log) => {
        const key = await log.subjects.key(T);
        await log.subjects.index(key);
        return { key, hashA: subjectHash(key, A), hashB: subjectHash(key, B) };
      });
    };

    const eraseA = (people: { key: Buffer; hashA: string }) =>
      withLog((log) =>
        log.subjects.erase({
          hash: people.hashA,
          key: people.key,
          cpf: A,
          erasureId: ERASURE,
          reason: 'LGPD art. 18 VI',
          by: 'conformance',
          now: ERASED_AT,
        }),
      );

    behaviour(
      "find: a person's proposals, events (pruned and quarantined ones too), averbações, messages, deliveries and ledger; nobody else's",
      async () => {
        const people = await seedPeople();
        const found = await withLog((log) => log.subjects.find(people.hashA));
        const keys = new Map(
          (await store.all('SELECT id, dedup_key FROM events')).map((e) => [Number(e.id), e.dedup_key]),
        );
        expect(found.hash).toBe(people.hashA);
        expect(found.proposals.map((p) => [p.nu_proposta, p.nu_cpf])).toEqual([
          [41, A],
          [43, A],
        ]);
        expect(found.events.map((e) => keys.get(e.id))).toEqual([
          'wh-1',
          'wh-2',
          'wh-3',
          'wh-4',
          'wh-5',
          'bad-1',
        ]);
        // Pruned: reached through its proposal, body gone; quarantined: through the CPF in its text.
        expect(found.events.find((e) => keys.get(e.id) === 'wh-2')!.body).toBeNull();
        expect(found.events.find((e) => keys.get(e.id) === 'bad-1')!.status).toBe('invalid');
        // (nu_proposta as text: its shape is the behaviour after this one.)
        expect(found.averbacoes.map((a) => [a.request_id, String(a.nu_proposta), a.status])).toEqual([
          ['req-41', '41', 'completed'],
        ]);
        const ofA = await store.all(
          `SELECT id FROM forward_messages WHERE nu_proposta IN (?, ?) OR request_id = ? ORDER BY id`,
          [41, 43, 'req-41'],
        );
        expect(found.messages.map((m) => m.id)).toEqual(ofA.map((m) => Number(m.id)));
        expect(found.messages.length).toBeGreaterThanOrEqual(5);
        expect(found.deliveries.map((d) => d.destination).sort()).toEqual(
          ['bi', ...found.messages.map(() => 'crm')].sort(),
        );
        expect(found.deliveries.every((d) => found.messages.some((m) => m.id === Number(d.message_id)))).toBe(
          true,
        );
        // The ledger: what was attempted (crm), not what only waits (bi); nothing of B's (erp).
        expect(found.sharing.map((s) => [s.recipient, s.channel, s.acknowledged_at])).toEqual(
          found.messages.map(() => ['crm', 'destination', at(MINUTE)]),
        );
        expect(found.sharing.map((s) => s.webhook_id).sort()).toEqual(
          found.messages.map((m) => m.webhook_id).sort(),
        );
        expect(found.erasures).toEqual([]);
        expect(found.notices).toEqual([]);
        // Nothing of B: no proposal 42, no B's CPF anywhere in what was found.
        expect(asText(found)).not.toContain(B);
        expect(asText(found)).not.toMatch(/"nu_proposta":"?42\b/);
        // And B, found, is B alone.
        const b = await withLog((log) => log.subjects.find(people.hashB));
        expect(b.proposals.map((p) => p.nu_proposta)).toEqual([42]);
        expect(b.events.map((e) => keys.get(e.id))).toEqual(['wh-6']);
        expect(b.sharing.map((s) => s.recipient).sort()).toEqual(['crm', 'erp']);
        expect(asText(b)).not.toContain(A);
      },
    );

    behaviour(FIND_SHAPE, async () => {
      const people = await seedPeople();
      const found = await withLog((log) => log.subjects.find(people.hashA));
      const numbers = (nus: readonly unknown[]) => nus.every((nu) => nu === null || typeof nu === 'number');
      expect(found.proposals.map((p) => p.nu_proposta)).toEqual([41, 43]);
      expect(numbers(found.events.map((e) => e.nu_proposta))).toBe(true);
      expect(numbers(found.messages.map((m) => m.nu_proposta))).toBe(true);
      expect(numbers(found.sharing.map((s) => s.nu_proposta))).toBe(true);
      expect(found.averbacoes.map((a) => a.nu_proposta)).toEqual([41]);
    });

    /** Every row of the tables an erasure writes, in id order, as the driver gives them. */
    const rowsOf = async (table: string, where = 'TRUE', params: readonly unknown[] = []) =>
      store.all(`SELECT * FROM ${table} WHERE ${where} ORDER BY 1`, params);
    const everything = async () => {
      const all: Record<string, unknown> = {};
      for (const table of SCANNED) all[table] = await rowsOf(table);
      return all;
    };

    behaviour(
      "erase: the person's CPF gone from every table, the legal-hold set kept, another person untouched, the destinations told",
      async () => {
        const people = await seedPeople();
        expect((await holdingCpf(A)).sort()).toEqual(
          [
            'averbacoes',
            'console_audit',
            'events',
            'forward_attempts',
            'forward_messages',
            'proposals',
          ].sort(),
        );
        const bEvents = "dedup_key = 'wh-6'";
        const bMessages = `nu_proposta = ?`;
        const before = {
          events: await rowsOf('events', 'TRUE'),
          proposals: await rowsOf('proposals'),
          bEvent: await rowsOf('events', bEvents),
          bProposal: await rowsOf('proposals', 'nu_proposta = ?', [42]),
          bMessages: await rowsOf('forward_messages', bMessages, [42]),
          bDeliveries: await rowsOf(
            'forward_deliveries',
            'message_id IN (SELECT id FROM forward_messages WHERE nu_proposta = ?)',
            [42],
          ),
          bLedger: await rowsOf('sharing_ledger', 'nu_proposta = ?', [42]),
          otherAudit: await rowsOf('console_audit', "target NOT LIKE '%cpf%'"),
        };
        const summary = await eraseA(people);
        expect(summary).toEqual({
          erasure_id: ERASURE,
          proposals: 2,
          events: 5, // wh-1, 3, 4, 5 and bad-1: wh-2 has no body left
          messages: expect.any(Number),
          attempts: 1,
          averbacoes: 1,
          audit: 1,
          notified: ['crm'],
          feed: false,
        });
        expect(summary.messages).toBeGreaterThanOrEqual(5);

        // No table writes A's CPF, in either form.
        expect(await holdingCpf(A)).toEqual([]);
        // A's proposals: the legal-hold set kept, marked erased by this erasure.
        const pick = (rows: Record<string, unknown>[], cols: string[]) =>
          rows.map((r) => Object.fromEntries(cols.map((c) => [c, r[c]])));
        const HOLD = [
          'nu_proposta',
          'uuid',
          'stage',
          'status',
          'vl_emprestimo',
          'created_at',
          'updated_at',
          'last_evento',
        ];
        const erasedNus = "nu_proposta IN ('41', '43')";
        expect(pick(await rowsOf('proposals', erasedNus), HOLD)).toEqual(
          pick(
            before.proposals.filter((p) => ['41', '43'].includes(String(p.nu_proposta))),
            HOLD,
          ),
        );
        expect(
          pick(await rowsOf('proposals', erasedNus), [
            'nu_cpf',
            'nu_cnpj_conveniada',
            'no_conveniada',
            'personal_erased_at',
            'erasure_id',
          ]),
        ).toEqual(
          [41, 43].map(() => ({
            nu_cpf: null,
            nu_cnpj_conveniada: null,
            no_conveniada: null,
            personal_erased_at: ERASED_AT.toISOString(),
            erasure_id: ERASURE,
          })),
        );
        // Events: the same rows, ids and dedup keys; statuses unchanged.
        expect(
          pick(await rowsOf('events'), ['id', 'dedup_key', 'status', 'nu_proposta', 'request_id']),
        ).toEqual(pick(before.events, ['id', 'dedup_key', 'status', 'nu_proposta', 'request_id']));
        // The erased bodies still say what happened to the loan.
        const [first] = await store.all(`SELECT body FROM events WHERE dedup_key = 'wh-1'`);
        const firstBody = JSON.parse(String(first!.body)) as {
          evento: string;
          dados: Record<string, unknown>;
        };
        expect(firstBody.evento).toBe('proposta.criada');
        expect(firstBody.dados).toMatchObject({ nu_proposta: 41, vl_emprestimo: 15000.5 });
        expect(firstBody.dados).not.toHaveProperty('nu_cpf');
        expect(firstBody.dados).not.toHaveProperty('no_conveniada');

        // B's rows: byte-identical.
        expect(await rowsOf('events', bEvents)).toEqual(before.bEvent);
        expect(await rowsOf('proposals', 'nu_proposta = ?', [42])).toEqual(before.bProposal);
        expect(await rowsOf('forward_messages', bMessages, [42])).toEqual(before.bMessages);
        expect(
          await rowsOf(
            'forward_deliveries',
            'message_id IN (SELECT id FROM forward_messages WHERE nu_proposta = ?)',
            [42],
          ),
        ).toEqual(before.bDeliveries);
        expect(await rowsOf('sharing_ledger', 'nu_proposta = ?', [42])).toEqual(before.bLedger);
        expect(await rowsOf('console_audit', "target NOT LIKE '%cpf%'")).toEqual(before.otherAudit);
        expect(await holdingCpf(B)).toEqual(['events', 'forward_messages', 'proposals']);

        // The journal: completed, with what each place lost.
        const [erasure] = await store.all('SELECT * FROM erasures');
        expect(erasure).toMatchObject({
          erasure_id: ERASURE,
          subject_hash: people.hashA,
          reason: 'LGPD art. 18 VI',
          requested_by: 'conformance',
          requested_at: ERASED_AT.toISOString(),
          completed_at: ERASED_AT.toISOString(),
        });
        expect(JSON.parse(String(erasure!.summary))).toEqual(summary);

        // The notice: one message of no event, no CPF, pending to crm alone (bi was never sent A's data).
        const notices = await store.all(`SELECT * FROM forward_messages WHERE type = 'subject.erased'`);
        expect(notices).toHaveLength(1);
        const notice = notices[0]!;
        expect(notice).toMatchObject({
          webhook_id: noticeWebhookId(ERASURE),
          event_id: null,
          order_key: `erasure:${ERASURE}`,
        });
        expect(cpfsInText(String(notice.body))).toEqual([]);
        expect(JSON.parse(String(notice.body))).toEqual({
          id: noticeWebhookId(ERASURE),
          type: 'subject.erased',
          created_at: ERASED_AT.toISOString(),
          data: { erasure_id: ERASURE, nu_propostas: [41, 43], request_ids: ['req-41'] },
        });
        expect(
          pick(await store.all('SELECT * FROM forward_deliveries WHERE message_id = ?', [notice.id]), [
            'destination',
            'status',
            'attempts',
          ]),
        ).toEqual([{ destination: 'crm', status: 'pending', attempts: 0 }]);
        // `find` now tells the erasure and its notice, and still reaches A's proposals.
        const found = await withLog((log) => log.subjects.find(people.hashA));
        expect(found.proposals.map((p) => [p.nu_proposta, p.erasure_id])).toEqual([
          [41, ERASURE],
          [43, ERASURE],
        ]);
        expect(found.notices).toEqual([
          { erasure_id: ERASURE, destination: 'crm', status: 'pending', attempts: 0, delivered_at: null },
        ]);
      },
    );

    behaviour(ERASE_AGAIN, async () => {
      const people = await seedPeople();
      const first = await eraseA(people);
      const after = await everything();
      const again = await eraseA(people);
      expect(await everything()).toEqual(after);
      expect(again.notified).toEqual(first.notified);
      expect(await store.all(`SELECT id FROM forward_messages WHERE type = 'subject.erased'`)).toHaveLength(
        1,
      );
    });

    behaviour(
      'stays erased: a late event of an erased proposal brings no CPF back, to the proposal, the log or its messages',
      async () => {
        const people = await seedPeople();
        await eraseA(people);
        await lifecycle(20, 'proposta.pre_aprovada', 43, A, { obs: `cliente ${A_FORMATTED}` });
        const report = await store.processing.run(new Date(at(3 * HOUR)));
        expect(report.errors).toEqual([]);
        expect(report.processed).toEqual([['proposta.pre_aprovada', 'done']]);
        const [proposal] = await store.all(
          'SELECT status, nu_cpf, nu_cnpj_conveniada, no_conveniada, personal_erased_at FROM proposals WHERE nu_proposta = ?',
          [43],
        );
        expect(proposal).toEqual({
          status: 'pre_aprovada',
          nu_cpf: null,
          nu_cnpj_conveniada: null,
          no_conveniada: null,
          personal_erased_at: ERASED_AT.toISOString(),
        });
        const late = await idOf('wh-20');
        const [event] = await store.all('SELECT body, status FROM events WHERE id = ?', [late]);
        expect(event!.status).toBe('done');
        const body = String(event!.body);
        expect(cpfsInText(body)).toEqual([]);
        expect(body).not.toContain(A_FORMATTED);
        expect(JSON.parse(body)).toMatchObject({ evento: 'proposta.pre_aprovada' });
        const caused = await store.all('SELECT type, body FROM forward_messages WHERE event_id = ?', [late]);
        expect(caused.length).toBeGreaterThan(0);
        for (const m of caused) {
          expect(cpfsInText(String(m.body))).toEqual([]);
          expect(String(m.body)).not.toContain(A_FORMATTED);
        }
        expect(await holdingCpf(A)).toEqual([]);
      },
    );

    behaviour(LATE_EVENT_NUMBERS, async () => {
      const people = await seedPeople();
      await eraseA(people);
      await lifecycle(20, 'proposta.pre_aprovada', 43, A, { vl_emprestimo: 20000, qt_parcela: 84 });
      await store.processing.run(new Date(at(3 * HOUR)));
      const [event] = await store.all('SELECT body FROM events WHERE id = ?', [await idOf('wh-20')]);
      const body = JSON.parse(String(event!.body)) as { dados: Record<string, unknown> };
      expect(body.dados).toMatchObject({ nu_proposta: 43, vl_emprestimo: 20000, qt_parcela: 84 });
      expect(body.dados).not.toHaveProperty('nu_cpf');
    });

    behaviour(
      'the ledger: an attempt records who was sent what, delivered acknowledges it, message retention keeps it',
      async () => {
        await addEvent(store, 1, 7, 'done');
        await store.exec(
          `INSERT INTO forward_messages (id, webhook_id, type, event_id, evento, nu_proposta, request_id, order_key,
             created_at, body)
           VALUES (101, 'msg_1', 'proposal.changed', 1, 'proposta.criada', 7, 'req-7', 'p:7', ?, '{"n":1}')`,
          [at(-2 * HOUR)],
        );
        await store.exec(
          `INSERT INTO forward_deliveries (id, message_id, destination, order_key, status, attempts, next_attempt_at,
             created_at, updated_at)
           VALUES (1, 101, 'crm', 'p:7', 'pending', 0, ?, ?, ?), (2, 101, 'erp', 'p:7', 'pending', 0, ?, ?, ?)`,
          [at(-2 * HOUR), at(-2 * HOUR), at(-2 * HOUR), at(-2 * HOUR), at(-2 * HOUR), at(-2 * HOUR)],
        );
        const ledger = () =>
          store.all(
            `SELECT recipient, channel, webhook_id, type, nu_proposta, request_id, first_sent_at, acknowledged_at
             FROM sharing_ledger ORDER BY id`,
          );
        const attempt = (n: number, next: AttemptRecord['next'], startedAt: string): AttemptRecord => ({
          deliveryId: 1,
          attempt: n,
          startedAt,
          durationMs: 3,
          httpStatus: next.status === 'delivered' ? 200 : 503,
          error: null,
          outcome: next.status === 'delivered' ? 'delivered' : 'temporary',
          answer: null,
          next,
          at: startedAt,
        });
        expect(await ledger()).toEqual([]);
        await store.sender.record(
          [attempt(1, { status: 'pending', nextAttemptAt: at(-HOUR) }, at(-90 * MINUTE))],
          [],
        );
        const row = {
          recipient: 'crm',
          channel: 'destination',
          webhook_id: 'msg_1',
          type: 'proposal.changed',
          nu_proposta: store.storeSql.dialect.storedNu(7),
          request_id: 'req-7',
          first_sent_at: at(-90 * MINUTE),
          acknowledged_at: null,
        };
        expect(await ledger()).toEqual([row]);
        // A second attempt adds no row; delivered acknowledges it, at the delivery's time.
        await store.sender.record([attempt(2, { status: 'delivered' }, at(-HOUR))], []);
        const acknowledged = { ...row, acknowledged_at: at(-HOUR) };
        expect(await ledger()).toEqual([acknowledged]);
        // erp was never sent it: marked delivered by hand (no attempt), the ledger has no row for it.
        await store.exec(
          `UPDATE forward_deliveries SET status = 'delivered', delivered_at = ? WHERE id = 2`,
          [at(-HOUR)],
        );
        const removed = await pruneForwarded(store.storeSql, T);
        expect(removed.pruned).toBe(1);
        expect(await store.all('SELECT id FROM forward_messages')).toEqual([]);
        expect(await ledger()).toEqual([acknowledged]);
      },
    );
  });

  // A knownWrong name that no behaviour has (renamed, misspelt) would hide nothing: refuse it.
  const stray = (driver.knownWrong ?? []).filter((name) => !declared.has(name));
  if (stray.length > 0) throw new Error(`${driver.name}: knownWrong names no behaviour: ${stray.join('; ')}`);
});

/**
 * The outbox rows of the sender's cases, the same in both stores: [delivery id, destination,
 * order_key, status, next_attempt_at]. Each delivery has its own message (id 100 + its id) of its
 * own event, stored an hour before T0; erp is paused by an operator.
 */
const OUTBOX: [number, string, string, 'pending' | 'delivered' | 'dead', string | null][] = [
  [1, 'crm', 'p:7', 'pending', T0], // p:7's head: due at T0
  [2, 'crm', 'p:7', 'pending', T0], // behind 1
  [3, 'crm', 'p:8', 'pending', at(10 * MINUTE)], // a head, due later
  [4, 'crm', 'p:9', 'delivered', null],
  [5, 'crm', 'p:9', 'pending', T0], // p:9's head: 4 is no longer pending
  [6, 'erp', 'p:7', 'pending', T0], // another destination's line
  [7, 'crm', 'p:10', 'dead', null],
  [8, 'crm', 'p:10', 'pending', at(5 * MINUTE)], // p:10's head: 7 is dead
  [9, 'crm', 'p:7', 'pending', at(MINUTE)], // behind 1 and 2, with a time of its own
];

/** Tracing (issue 35): message 102 was stored with the processing's trace context, the others without. */
const traceContextOf = (id: number): string | null =>
  id === 2 ? '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 vendor=abc' : null;

/** Writes {@link OUTBOX}: messages as the pipeline or a turn stores them, their deliveries, erp's pause. */
async function seedOutbox(store: Opened): Promise<void> {
  for (const [id, destination, orderKey, status, next] of OUTBOX) {
    const created = at((id - 60) * MINUTE);
    await addEvent(store, id, 7, 'done');
    await store.exec(
      `INSERT INTO forward_messages (id, webhook_id, type, event_id, evento, nu_proposta, request_id, order_key,
         created_at, body, trace_context)
       VALUES (?, ?, 'proposal.changed', ?, 'proposta.criada', 7, NULL, ?, ?, ?, ?)`,
      [
        100 + id,
        `msg_${id}`,
        id,
        orderKey,
        created,
        `{"n":${id},"nu_cpf":"12345678909"}`,
        traceContextOf(id),
      ],
    );
    const settled = status === 'pending' ? null : at(-HOUR);
    await store.exec(
      `INSERT INTO forward_deliveries (id, message_id, destination, order_key, status, attempts, next_attempt_at,
         last_status, last_error, created_at, updated_at, delivered_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [
        id,
        100 + id,
        destination,
        orderKey,
        status,
        status === 'pending' ? 0 : 1,
        next,
        status === 'delivered' ? 200 : status === 'dead' ? 410 : null,
        status === 'dead' ? 'HTTP 410' : null,
        created,
        settled ?? created,
        status === 'delivered' ? settled : null,
      ],
    );
  }
  await store.exec(
    `INSERT INTO forward_destinations (name, paused, circuit, updated_at) VALUES ('erp', ?, NULL, ?)`,
    [1, T0], // 1: SQLite's 0/1, PostgreSQL reads the text '1' as true
  );
}
