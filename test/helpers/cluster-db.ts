import { Client, Pool } from 'pg';
import { OUTBOX_CHANNEL } from '../../src/postgres/pg-outbox';
import { Relay } from '../../src/runtime/cluster/relay';
import type { PgSql } from '../../src/postgres/pg-sql';
import type { Db } from '../../src/sqlite/database';
import { openSpool, type Spool } from '../../src/sqlite/spool';
import { postRaw, type PostResult, SECRET, signed } from './payloads';
import { withClient } from './postgres';

/**
 * Cluster mode's tests (contract §10): a PostgreSQL pool that survives a server restart, the relay
 * built on a real SQLite spool, bounded waits on PostgreSQL, and signed POSTs to a receiver.
 */

/** A pool whose idle connections may die (server stopped or restarted) without crashing the test. */
export function openPool(url: string, max = 4): Pool {
  const pool = new Pool({ connectionString: url, max, connectionTimeoutMillis: 5000 });
  pool.on('error', () => undefined);
  return pool;
}

/** Rows of one query on `pool`. */
export async function rows<R = Record<string, unknown>>(
  pool: Pool,
  text: string,
  values: unknown[] = [],
): Promise<R[]> {
  return (await pool.query(text, values)).rows as R[];
}

/** One number from a `SELECT count(*) …` (or any single numeric column). */
export async function count(pool: Pool, text: string, values: unknown[] = []): Promise<number> {
  const [row] = await rows<{ n: string | number }>(pool, text, values);
  return Number(row?.n ?? 0);
}

/**
 * Waits until `probe` returns something truthy (not undefined, null, false, 0 or ''), polling; throws naming
 * `what` after `timeoutMs` (a bound for a hung test, not a performance threshold).
 */
export async function waitFor<T>(
  probe: () => Promise<T | undefined | null | false> | T | undefined | null | false,
  what: string,
  timeoutMs = 30_000,
): Promise<T> {
  const until = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await probe();
      // Truthy only: 0 (an empty count) and '' are "not yet" as well.
      if (value) return value;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > until)
      throw new Error(
        `timed out waiting for: ${what}${lastError ? ` (last error: ${(lastError as Error).message})` : ''}`,
      );
    await new Promise((r) => setTimeout(r, 25));
  }
}

export interface LogLine {
  level: 'info' | 'warn' | 'error';
  fields: Record<string, unknown>;
  message: string;
}

/** A logger of the `{info, warn, error}(fields, message)` shape that keeps what it was told. */
export function memoryLogger(): {
  lines: LogLine[];
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
  error(fields: Record<string, unknown>, message: string): void;
} {
  const lines: LogLine[] = [];
  return {
    lines,
    info: (fields, message) => void lines.push({ level: 'info', fields, message }),
    warn: (fields, message) => void lines.push({ level: 'warn', fields, message }),
    error: (fields, message) => void lines.push({ level: 'error', fields, message }),
  };
}

export type QueueTurns = (sql: PgSql, keys: readonly string[]) => Promise<void>;

/** A turn that only records the work keys each batch asked for (one array per committed or tried batch). */
export function recordingTurns(): { calls: string[][]; queueTurns: QueueTurns } {
  const calls: string[][] = [];
  return {
    calls,
    queueTurns: async (_sql, keys) => {
      calls.push([...keys]);
    },
  };
}

/** The relay of one replica's SQLite spool, as ClusterNode builds it. */
export function relayOf(
  pool: Pool,
  db: Db,
  options: { replicaId: string; queueTurns: QueueTurns; batch?: number; onError?: (err: Error) => void },
): { relay: Relay; spool: Spool } {
  const spool = openSpool(db);
  const relay = new Relay(pool, spool, {
    replicaId: options.replicaId,
    batch: options.batch ?? 1000,
    intervalMs: 20,
    queueTurns: options.queueTurns,
    now: () => new Date(),
    logger: memoryLogger(),
    onError: options.onError,
  });
  return { relay, spool };
}

/**
 * Waits until each receiver's relay has moved everything its spool holds to PostgreSQL (its cursor
 * is past its last delivery). Events in PostgreSQL being final says nothing of a replica still
 * relaying its copies of them: their duplicates and deliveries are counted only when it has.
 */
export async function spoolsRelayed(receivers: readonly { store: { db: Db } }[]): Promise<void> {
  const spools = receivers.map((r) => openSpool(r.store.db));
  await waitFor(() => spools.every((s) => s.backlog().count === 0), "every replica's spool relayed");
}

/** Relays until the spool is drained; returns the batches it took. */
export async function drain(relay: Relay): Promise<number> {
  let batches = 0;
  while ((await relay.relayOnce()) > 0) batches += 1;
  return batches;
}

/** POSTs `body` (an object, a string or raw bytes) signed with the tests' secret. */
export function sendSigned(
  baseUrl: string,
  body: unknown,
  path = '/webhooks',
  secret = SECRET,
): Promise<PostResult> {
  const { raw, signature } = signed(body, secret);
  return postRaw(`${baseUrl}${path}`, raw, {
    'content-type': 'application/json',
    'x-service-signature': signature,
  });
}

/**
 * Installs, in a cluster database (migrated), a trigger that makes the life-cycle handler fail for
 * chosen events: recording a transition of an event whose dedup key is in `test_failures` raises.
 * The turn sees a handler that throws, as a partner's failing handler would in SQLite mode.
 */
export async function installFailureTrigger(pool: Pool): Promise<void> {
  await pool.query(`
    CREATE TABLE test_failures (dedup_key text PRIMARY KEY);
    CREATE FUNCTION test_fail_transition() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF EXISTS (SELECT 1 FROM test_failures f JOIN events e ON e.dedup_key = f.dedup_key WHERE e.id = NEW.event_id) THEN
        RAISE EXCEPTION 'injected failure for event %', NEW.event_id;
      END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER test_fail_transition BEFORE INSERT ON proposal_transitions
      FOR EACH ROW EXECUTE FUNCTION test_fail_transition();
  `);
}

/** Makes the event with `dedupKey` fail (installFailureTrigger) until the trigger is dropped. */
export async function failEvent(pool: Pool, dedupKey: string): Promise<void> {
  await pool.query('INSERT INTO test_failures (dedup_key) VALUES ($1)', [dedupKey]);
}

/** Drops what installFailureTrigger installed. */
export async function dropFailureTrigger(pool: Pool): Promise<void> {
  await pool.query(`
    DROP TRIGGER test_fail_transition ON proposal_transitions;
    DROP FUNCTION test_fail_transition();
    DROP TABLE test_failures;
  `);
}

/**
 * A connection LISTENing on the outbox's channel (`consig_forward`) of `url`; `received` counts its
 * empty notifications, `settled` waits until every notification committed before it has arrived.
 */
export async function listenOutbox(url: string): Promise<{
  received: () => number;
  settled: () => Promise<void>;
  close: () => Promise<void>;
}> {
  const client = new Client({ connectionString: url });
  client.on('error', () => {});
  await client.connect();
  let received = 0;
  let sentinels = 0;
  client.on('notification', (n) => {
    if (n.payload === 'sentinel') sentinels += 1;
    else received += 1;
  });
  await client.query(`LISTEN ${OUTBOX_CHANNEL}`);
  return {
    received: () => received,
    // Notifications arrive in commit order: once ours arrives, every earlier one has.
    async settled() {
      const before = sentinels;
      await withClient(url, (c) => c.query(`SELECT pg_notify('${OUTBOX_CHANNEL}', 'sentinel')`));
      await waitFor(() => sentinels > before, 'the sentinel notification', 10_000);
    },
    close: () => client.end(),
  };
}
