import { clampLimit } from '../domain/list-limit';
import type { NewDelivery } from '../domain/delivery';
import { MigrationError, StorageError } from '../domain/errors';
import type { EventStatus, NewEvent } from '../domain/event-status';
import type { AverbacaoRow, ProposalRow, TimelineRow } from '../domain/log-rows';
import {
  AVERBACAO,
  type AverbacaoFilter,
  averbacoesQuery,
  PROPOSAL,
  TIMELINE,
} from '../domain/sql/read-statements';
import { MARK_STALE, RECORD_POLL } from '../domain/sql/registry-poll-statements';
import { type Db, type OpenOptions, openDatabase } from './database';
import { prepareShared } from './sqlite-prepare';
import { assertKnown, loadMigrations, type Migration, migrate } from './sqlite-migrate';
import { migrationFileName } from '../domain/migration-files';

/** The SQLite log: one file, its repositories, and the checks /readyz needs. */
export type Store = ReturnType<typeof buildStore>;

export interface OpenStoreOptions extends OpenOptions {
  /** Apply pending migrations (serve, migrate). Otherwise a database behind the code is refused. */
  migrate?: boolean;
  migrations?: readonly Migration[];
}

export function openStore(path: string, options: OpenStoreOptions = {}) {
  const migrations = options.migrations ?? loadMigrations();
  const db = openDatabase(path, options);
  try {
    if (options.migrate) migrate(db, migrations);
    const applied = assertKnown(db, migrations);
    if (applied.length < migrations.length) {
      const missing = migrations.filter((m) => !applied.includes(m.version)).map(migrationFileName);
      throw new MigrationError(
        `the database at ${path} is not migrated (${applied.length} of ${migrations.length} migrations applied; missing ${missing.join(', ')}): run \`consig-receiver migrate\``,
      );
    }
  } catch (err) {
    db.close();
    throw err;
  }
  return buildStore(db, path, migrations.length);
}

function buildStore(db: Db, path: string, expectedVersions: number) {
  const probe = db.readonly ? null : db.prepare('UPDATE health_probe SET checked_at = ? WHERE id = 1');
  const versions = db.prepare<[], { n: number }>('SELECT count(*) AS n FROM schema_migrations');
  return {
    db,
    path,
    events: eventsRepo(db),
    deliveries: deliveriesRepo(db),
    proposals: proposalsRepo(db),
    averbacoes: averbacoesRepo(db),
    /** Proves the database is open, migrated and takes a write; throws StorageError otherwise. */
    probeWrite(now: Date): void {
      try {
        if (!db.open) throw new Error('database is closed');
        if (probe === null) throw new Error('database is open read-only');
        const n = versions.get()?.n ?? 0;
        if (n !== expectedVersions) throw new Error(`schema has ${n} of ${expectedVersions} migrations`);
        probe.run(now.toISOString());
      } catch (err) {
        throw new StorageError((err as Error).message, { cause: err });
      }
    },
    close(): void {
      if (db.open) db.close();
    },
  };
}

/** The `events` table (contract §5): the ingest writer's and the poller's insert. */
export function eventsRepo(db: Db) {
  const insert = db.prepare<unknown[], { id: number }>(
    `INSERT INTO events (dedup_key, webhook_id, kind, evento, nu_proposta, request_id, registry_status, tentativa,
       received_at, body, body_bytes, status, last_error, trace_context)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (dedup_key) DO NOTHING
     RETURNING id`,
  );
  const bumpDuplicate = db.prepare<[string, string], { id: number; status: EventStatus }>(
    'UPDATE events SET duplicates = duplicates + 1, last_duplicate_at = ? WHERE dedup_key = ? RETURNING id, status',
  );
  return {
    /** Inserts the event unless its dedup key is known; then counts the duplicate instead. */
    insertOrCountDuplicate(e: NewEvent): { id: number; duplicate: boolean; status: EventStatus } {
      const row = insert.get(
        e.dedupKey,
        e.webhookId,
        e.kind,
        e.evento,
        e.nuProposta,
        e.requestId,
        e.registryStatus,
        e.tentativa,
        e.receivedAt,
        e.body,
        e.bodyBytes,
        e.status,
        e.lastError,
        e.traceContext ?? null,
      );
      if (row) return { id: row.id, duplicate: false, status: e.status };
      const dup = bumpDuplicate.get(e.receivedAt, e.dedupKey);
      if (!dup) throw new Error(`dedup key conflict without a row: ${e.dedupKey}`);
      return { id: dup.id, duplicate: true, status: dup.status };
    },
  };
}

export type EventsRepo = ReturnType<typeof eventsRepo>;

/** The `deliveries` audit table (contract §5): one row per HTTP request to a webhook route. */
function deliveriesRepo(db: Db) {
  const insert = db.prepare(
    `INSERT INTO deliveries (received_at, path, outcome, http_status, dedup_key, event_id, duration_ms, body_bytes,
       secret_index, remote_addr, detail, order_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  return {
    insert(d: NewDelivery): void {
      insert.run(
        d.receivedAt,
        d.path,
        d.outcome,
        d.httpStatus,
        d.dedupKey,
        d.eventId,
        d.durationMs,
        d.bodyBytes,
        d.secretIndex,
        d.remoteAddr,
        d.detail,
        d.orderAt ?? null,
      );
    },
  };
}

export type DeliveriesRepo = ReturnType<typeof deliveriesRepo>;

/**
 * Reads of `proposals` and `proposal_transitions` for people (the demo, the tests), written once for
 * both stores (domain/sql/read-statements.ts); one `?` each.
 */
function proposalsRepo(db: Db) {
  const get = prepareShared<ProposalRow>(db, PROPOSAL);
  const timeline = prepareShared<TimelineRow>(db, TIMELINE);
  return {
    get: (nu: number | string) => get.get([nu]),
    timeline: (nu: number | string) => timeline.all([nu]),
  };
}

/**
 * The `averbacoes` table (contract §5): tracked registration requests and the poller's schedule.
 * The reads and the poll's writes are written once for both stores (domain/sql/).
 */
export function averbacoesRepo(db: Db) {
  const get = prepareShared<AverbacaoRow>(db, AVERBACAO);
  const due = db.prepare<[string, number], AverbacaoRow>(
    'SELECT * FROM averbacoes WHERE next_poll_at IS NOT NULL AND next_poll_at <= ? ORDER BY next_poll_at LIMIT ?',
  );
  const recordPoll = prepareShared<{ polling: number }>(db, RECORD_POLL);
  const markStale = prepareShared(db, MARK_STALE);
  return {
    get: (requestId: string) => get.get([requestId]),
    due: (now: string, limit: number) => due.all(now, limit),
    /** Records a poll; returns whether the registration is still polled. */
    recordPoll(
      requestId: string,
      p: { attempts: number; nextPollAt: string | null; outcome: string; now: string },
    ): boolean {
      const [row] = recordPoll.all([requestId, p.attempts, p.nextPollAt, p.now, p.outcome]);
      return Boolean(row?.polling);
    },
    markStale: (requestId: string, now: string) => markStale.run([requestId, now]),
    list(filter: AverbacaoFilter = {}): AverbacaoRow[] {
      const q = averbacoesQuery({ ...filter, limit: clampLimit(filter.limit) });
      return prepareShared<AverbacaoRow>(db, q.text).all(q.params);
    },
  };
}
