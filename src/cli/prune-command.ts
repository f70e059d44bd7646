import { existsSync } from 'node:fs';
import { describePgTarget, pgTarget, withPgConnection } from '../cluster/pg-reads';
import { prunePostgres, transactionOn } from '../cluster/pg-retention';
import type { Config } from '../config';
import { UsageError } from '../domain/errors';
import { type PruneSummary, retentionCutoff, type SpoolPruneSummary } from '../domain/retention';
import { pruneBodies, pruneForwarded } from '../store/retention';
import { openSpool } from '../store/spool';
import { openStore } from '../store/store';
import { openReadOnly, type Output } from './log-commands';

/**
 * `prune [--days N]`: what RETENTION_DAYS does in `serve`, on demand. In cluster mode
 * (DATABASE_URL) it prunes PostgreSQL, and then the spool at DATABASE_PATH when there is one (a
 * command run beside a replica): it returns a promise there, and a synchronous result on SQLite.
 */
export function pruneCommand(
  config: Config,
  opts: { days?: string; json?: boolean },
  io: Output,
): void | Promise<void> {
  const days = opts.days === undefined ? config.retentionDays : Number(opts.days);
  if (days === undefined) throw new UsageError('prune needs --days N (or RETENTION_DAYS)');
  if (!Number.isSafeInteger(days) || days < 1)
    throw new UsageError(`--days expects a whole number ≥ 1, got "${opts.days}"`);
  if (config.cluster) return pruneCluster(config, config.cluster.databaseUrl, days, opts, io);
  openReadOnly(config).close(); // one clear line when the database is missing or not migrated
  const store = openStore(config.databasePath, {
    busyTimeoutMs: Math.max(config.sqlite.busyTimeoutMs, 5000),
  });
  try {
    const now = new Date();
    const cutoff = retentionCutoff(now, days);
    const { pruned } = pruneBodies(store.db, cutoff, now);
    const forwarded = pruneForwarded(store.db, cutoff).pruned;
    const summary: PruneSummary = { pruned, forwarded, cutoff: cutoff.toISOString() };
    if (opts.json) return io.out(JSON.stringify(summary));
    printSummary(summary, io);
  } finally {
    store.close();
  }
}

function printSummary(s: PruneSummary, io: Output): void {
  io.out(
    `removed the bodies of ${s.pruned} finished event(s) received before ${s.cutoff} (rows and dedup keys kept)`,
  );
  io.out(
    `removed ${s.forwarded} forwarded message(s) created before then and delivered to every destination`,
  );
}

/**
 * Cluster mode: PostgreSQL first, in its short transactions (pg-retention.ts; an unreachable server
 * is one line naming host, port and database, and nothing is touched), then the local spool. The
 * JSON has SQLite mode's keys, and `spool`: what left the spool, or null when there is none here.
 */
async function pruneCluster(
  config: Config,
  databaseUrl: string,
  days: number,
  opts: { json?: boolean },
  io: Output,
): Promise<void> {
  const now = new Date();
  const cutoff = retentionCutoff(now, days);
  // Checked before PostgreSQL is touched: a spool that cannot be opened stops the command first.
  const hasSpool = existsSync(config.databasePath);
  if (hasSpool) openReadOnly(config).close();
  const summary = await withPgConnection(
    databaseUrl,
    (client) => prunePostgres(transactionOn(client), cutoff, now),
    'consig-receiver prune',
  );
  const spool = hasSpool ? pruneLocalSpool(config, cutoff) : null;
  if (opts.json) return io.out(JSON.stringify({ ...summary, spool }));
  io.out(`PostgreSQL ${describePgTarget(pgTarget(databaseUrl))}:`);
  printSummary(summary, io);
  io.out(
    spool === null
      ? `no spool at ${config.databasePath}: only PostgreSQL was pruned`
      : `spool ${config.databasePath}: removed ${spool.deliveries} relayed delivery row(s) and ${spool.events} event(s) received before then (rows not relayed yet kept)`,
  );
}

function pruneLocalSpool(config: Config, cutoff: Date): SpoolPruneSummary {
  const store = openStore(config.databasePath, {
    busyTimeoutMs: Math.max(config.sqlite.busyTimeoutMs, 5000),
  });
  try {
    return openSpool(store.db).prune(cutoff);
  } finally {
    store.close();
  }
}
