import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import { FINAL_STATUSES } from '../domain/lifecycle';
import { BODY_PRUNABLE_STATUSES, type PruneSummary, removableMessages } from '../domain/retention';
import { inList } from '../domain/sql/read-statements';
import type { StoreQuery, StoreSql } from '../domain/sql/store-sql';

/**
 * RETENTION_DAYS and `prune` (contract §10), written once for both stores (issue 24): the rule is
 * domain/retention.ts's (what goes, what stays, the batch sizes, the log lines); here are its
 * statements, on the SQLite file or on PostgreSQL ({@link StoreSql}). Used by the `serve` timers of
 * both modes (runtime/retention-schedule.ts, runtime/cluster/pg-retention.ts) and by `prune`.
 *
 * A pass walks each table by id from the start in batches, each batch one short transaction, and
 * the event loop turns between batches: the receiver's own writes never wait for more than one
 * batch (SQLite's file write lock, PostgreSQL's row locks), and ingest answers meanwhile. A pass
 * that stops half-way leaves only whole batches behind; the next pass walks again and finds what
 * is left.
 *
 * What the two stores do differently is in their dialect (domain/sql/dialect.ts):
 * - `rowLock`: PostgreSQL locks the rows a batch changes without waiting for them (`SKIP LOCKED`: a
 *   row a relay batch is counting a duplicate on, or a replay is taking, is left for the next
 *   pass). SQLite needs none: a write transaction holds the file's one write lock.
 * - `idsFollowArrival`: SQLite stores events in arrival order, so its walk ends at the first one
 *   received at or after the cutoff. PostgreSQL walks the whole table: `events.id` is the order in
 *   which relay batches committed, and a spool relayed after an outage (or a SQLite history moved
 *   to cluster mode) puts old `received_at` behind new ids.
 */

/** One committed batch, for measurements (bench/pg-retention.ts: how long a batch held its locks). */
export interface BatchReport {
  kind: 'bodies' | 'messages' | 'proposals' | 'spool' | 'subjects';
  /** Rows the batch changed (bodies removed, messages removed, spool deliveries removed). */
  rows: number;
  ms: number;
}

export interface PruneOptions {
  /** Events looked at per batch. @default the dialect's `retentionBatch.bodies` */
  bodyBatch?: number;
  /** Messages looked at per batch. @default the dialect's `retentionBatch.messages` */
  messageBatch?: number;
  /** Asked between batches: true ends the pass there (it throws {@link PassInterrupted}). */
  shouldStop?(): boolean;
  /**
   * A pause between batches, for a pass run beside another process on the same SQLite file (a
   * `subject` command beside `serve`): SQLite hands its write lock to no one in particular, and
   * without a pause the pass takes it back before the server's writer, retrying every 10 ms, gets in.
   * @default none (a turn of the event loop)
   */
  pauseMs?: number;
  onBatch?(batch: BatchReport): void;
}

/** A pass ended between two batches because it was asked to stop: what it committed stays. */
export class PassInterrupted extends Error {
  constructor() {
    super('retention pass interrupted between two batches (what it committed stays; the next pass goes on)');
    this.name = 'PassInterrupted';
  }
}

/** One pass: bodies, then messages, then proposals' personal data (the order of domain/retention.ts). */
export async function prunePass(
  log: StoreSql,
  cutoff: Date,
  now: Date,
  options: PruneOptions = {},
): Promise<PruneSummary> {
  const { pruned } = await pruneBodies(log, cutoff, now, options);
  const { pruned: forwarded } = await pruneForwarded(log, cutoff, options);
  const anonymised = await prunePersonal(log, cutoff, now, options);
  return { pruned, forwarded, anonymised, cutoff: cutoff.toISOString() };
}

/**
 * Removes the personal fields of proposals final and unchanged since before `cutoff` (issue 45,
 * domain/retention.ts), marking them as an erasure does (`personal_erased_at`, no erasure id), a
 * batch per transaction; on PostgreSQL a proposal a turn holds is left for the next pass.
 */
export async function prunePersonal(
  log: StoreSql,
  cutoff: Date,
  now: Date,
  options: PruneOptions = {},
): Promise<number> {
  const size = log.dialect.retentionBatch.proposals;
  const finals = [...FINAL_STATUSES];
  const statuses = inList(finals.length, 3);
  const select = `SELECT nu_proposta FROM proposals WHERE personal_erased_at IS NULL AND updated_at < $1
    AND (nu_cpf IS NOT NULL OR nu_cnpj_conveniada IS NOT NULL OR no_conveniada IS NOT NULL)
    AND status IN ${statuses} LIMIT $2${log.dialect.rowLock('NO KEY UPDATE SKIP LOCKED')}`;
  return walk(options, 'proposals', () =>
    log.write(async (q) => {
      const rows = await q.rows<{ nu_proposta: number | string }>(select, [
        cutoff.toISOString(),
        size,
        ...finals,
      ]);
      for (const { nu_proposta } of rows)
        await q.run(
          `UPDATE proposals SET nu_cpf = NULL, nu_cnpj_conveniada = NULL, no_conveniada = NULL,
             personal_erased_at = $1 WHERE nu_proposta = $2`,
          [now.toISOString(), nu_proposta],
        );
      return { rows: rows.length, done: rows.length < size };
    }),
  );
}

/**
 * Runs `batch` until it says the walk is done, a turn of the event loop apart, asking `shouldStop`
 * before each: every retention walk (the log's tables here, a replica's spool in sqlite/spool.ts).
 */
export async function walk(
  options: Pick<PruneOptions, 'shouldStop' | 'onBatch' | 'pauseMs'>,
  kind: BatchReport['kind'],
  batch: () => Promise<{ rows: number; done: boolean }>,
): Promise<number> {
  let total = 0;
  for (let first = true; ; first = false) {
    if (!first) await (options.pauseMs ? sleep(options.pauseMs) : nextTurn());
    if (options.shouldStop?.()) throw new PassInterrupted();
    const started = performance.now();
    const { rows, done } = await batch();
    options.onBatch?.({ kind, rows, ms: performance.now() - started });
    total += rows;
    if (done) return total;
  }
}

// The next batch of ids (any status: that is the walk), and where it ends: its last id, and on
// SQLite the first event of it received at or after the cutoff ($3).
const BODY_SCOPE = `SELECT max(id) AS upto, count(*) AS scanned,
  min(CASE WHEN received_at >= $3 THEN id END) AS first_new
  FROM (SELECT id, received_at FROM events WHERE id > $1 ORDER BY id LIMIT $2) scope`;

/**
 * Among ids $2 < id < $3, the events the rule names lose their bodies. On PostgreSQL they are
 * locked with the lock that does not block foreign-key checks (`NO KEY`: the relay's deliveries
 * still reference them freely), and the status is checked again on the locked version, so an
 * event replayed meanwhile keeps its body.
 */
const pruneBodiesIn = (lock: string) => {
  const statuses = inList(BODY_PRUNABLE_STATUSES.length, 5);
  return `UPDATE events SET body = NULL, body_pruned_at = $1
  WHERE id IN (SELECT id FROM events WHERE id > $2 AND id < $3 AND received_at < $4
      AND status IN ${statuses} AND body IS NOT NULL${lock})
    AND status IN ${statuses}`;
};

/**
 * Removes the raw bodies of finished events received before `cutoff` (domain/retention.ts),
 * keeping rows and dedup keys.
 */
export async function pruneBodies(
  log: StoreSql,
  cutoff: Date,
  now: Date,
  options: PruneOptions = {},
): Promise<{ pruned: number; scanned: number }> {
  const { dialect } = log;
  const size = options.bodyBatch ?? dialect.retentionBatch.bodies;
  const cutoffIso = cutoff.toISOString();
  const update = pruneBodiesIn(dialect.rowLock('NO KEY UPDATE SKIP LOCKED'));
  let lastId = 0;
  let scanned = 0;
  const pruned = await walk(options, 'bodies', () =>
    log.write(async (q) => {
      const [scope] = await q.rows<{ upto: number | null; scanned: number; first_new: number | null }>(
        BODY_SCOPE,
        [lastId, size, cutoffIso],
      );
      if (scope === undefined || scope.upto === null) return { rows: 0, done: true };
      const ends = dialect.idsFollowArrival && scope.first_new !== null;
      const before = ends ? scope.first_new! : scope.upto + 1;
      const rows = await q.run(update, [
        now.toISOString(),
        lastId,
        before,
        cutoffIso,
        ...BODY_PRUNABLE_STATUSES,
      ]);
      scanned += scope.scanned;
      lastId = scope.upto;
      return { rows, done: ends || scope.scanned < size };
    }),
  );
  return { pruned, scanned };
}

/**
 * Removes forwarded messages created before `cutoff` whose every delivery is `delivered`
 * (domain/retention.ts), with their deliveries and attempts; one transaction per batch:
 * 1. the batch's messages, locked on PostgreSQL (`SKIP LOCKED`): nobody can add a delivery to one
 *    meanwhile (a backfill's foreign-key check waits), and one being backfilled now is left for
 *    the next pass;
 * 2. their deliveries, locked (`SKIP LOCKED`), then counted: a message is removed only when every
 *    one of its deliveries was read here and is delivered, so a replay (delivered → pending) either
 *    committed before (and the message stays) or waits for this commit and finds nothing to replay;
 * 3. attempts, deliveries, messages.
 * The walk ends at the newest message created before the cutoff when the pass began (one seek on
 * `forward_messages_created`); any created before the cutoff with a higher id is the next pass's.
 * The change feed then starts after the removed messages: a cursor older than them reads on from
 * the first one kept.
 */
export async function pruneForwarded(
  log: StoreSql,
  cutoff: Date,
  options: PruneOptions = {},
): Promise<{ pruned: number }> {
  const size = options.messageBatch ?? log.dialect.retentionBatch.messages;
  const cutoffIso = cutoff.toISOString();
  const [last] = await log.read((q) =>
    q.rows<{ id: number }>(
      'SELECT id FROM forward_messages WHERE created_at < $1 ORDER BY created_at DESC, id DESC LIMIT 1',
      [cutoffIso],
    ),
  );
  if (last === undefined) return { pruned: 0 };
  let lastId = 0;
  const pruned = await walk(options, 'messages', () =>
    log.write(async (q) => {
      const batch = await pruneMessageBatch(q, lastId, last.id, cutoffIso, size);
      lastId = batch.lastId ?? lastId;
      return { rows: batch.pruned, done: batch.lastId === null };
    }),
  );
  return { pruned };
}

async function pruneMessageBatch(
  q: StoreQuery,
  afterId: number,
  upto: number,
  cutoffIso: string,
  size: number,
): Promise<{ pruned: number; lastId: number | null }> {
  const lock = q.dialect.rowLock('UPDATE SKIP LOCKED');
  // Lists of ids as one parameter (the dialect's `inIds`): one text whatever the batch holds.
  const among = (column: string) => q.dialect.inIds(column, '$1');
  const candidates = (
    await q.rows<{ id: number }>(
      `SELECT id FROM forward_messages WHERE id > $1 AND id <= $2 AND created_at < $3
       ORDER BY id LIMIT $4${lock}`,
      [afterId, upto, cutoffIso, size],
    )
  ).map((r) => r.id);
  if (candidates.length === 0) return { pruned: 0, lastId: null };
  const list = q.dialect.idList(candidates);
  const read = await q.rows<{ message_id: number; status: string }>(
    `SELECT message_id, status FROM forward_deliveries WHERE ${among('message_id')}${lock}`,
    [list],
  );
  const totals = await q.rows<{ message_id: number; n: number }>(
    `SELECT message_id, count(*) AS n FROM forward_deliveries WHERE ${among('message_id')} GROUP BY message_id`,
    [list],
  );
  const gone = removableMessages(
    candidates,
    read.map((d) => ({ messageId: d.message_id, status: d.status })),
    new Map(totals.map((t) => [t.message_id, t.n])),
  );
  if (gone.length > 0) {
    const goneList = [q.dialect.idList(gone)];
    await q.run(
      `DELETE FROM forward_attempts WHERE delivery_id IN
         (SELECT id FROM forward_deliveries WHERE ${among('message_id')})`,
      goneList,
    );
    await q.run(`DELETE FROM forward_deliveries WHERE ${among('message_id')}`, goneList);
    await q.run(`DELETE FROM forward_messages WHERE ${among('id')}`, goneList);
  }
  const lastId = candidates[candidates.length - 1]!;
  return { pruned: gone.length, lastId: candidates.length < size ? null : lastId };
}
