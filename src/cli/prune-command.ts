import { existsSync } from 'node:fs';
import { describePgTarget, pgTarget, withPgConnection } from '../cluster/pg-reads';
import { prunePostgres, transactionOn } from '../cluster/pg-retention';
import type { Config } from '../config';
import { UsageError } from '../domain/errors';
import { type PruneSummary, retentionCutoff, type SpoolPruneSummary } from '../domain/retention';
import { pruneSqlite } from '../store/retention';
import { openSpool } from '../store/spool';
import { openStore } from '../store/store';
import { openReadOnly, type Output } from './log-commands';

/**
 * `prune [--days N]`: what RETENTION_DAYS does in `serve`, on demand. In cluster mode
 * (DATABASE_URL) it prunes PostgreSQL, and then the spool at DATABASE_PATH when there is one (a
 * command run beside a replica). The store is chosen in one place ({@link pruneTarget}); the rule,
 * the cutoff and the batches are domain/retention.ts's in both.
 */
export function pruneCommand(
  config: Config,
  opts: { days?: string; json?: boolean },
  io: Output,
): Promise<void> {
  const days = opts.days === undefined ? config.retentionDays : Number(opts.days);
  if (days === undefined) throw new UsageError('prune needs --days N (or RETENTION_DAYS)');
  if (!Number.isSafeInteger(days) || days < 1)
    throw new UsageError(`--days expects a whole number ≥ 1, got "${opts.days}"`);
  const now = new Date();
  return pruneTarget(config)(retentionCutoff(now, days), now).then((report) => {
    if (opts.json) io.out(JSON.stringify(report.json));
    else for (const line of report.lines) io.out(line);
  });
}

/** What a store's pass removed: the `--json` object and the text lines. */
interface PruneReport {
  json: PruneSummary & { spool?: SpoolPruneSummary | null };
  lines: string[];
}

/** The store `prune` works on: the one place the command looks at the mode. */
function pruneTarget(config: Config): (cutoff: Date, now: Date) => Promise<PruneReport> {
  const cluster = config.cluster;
  if (cluster) return (cutoff, now) => pruneCluster(config, cluster.databaseUrl, cutoff, now);
  return (cutoff, now) => Promise.resolve(pruneSqliteFile(config, cutoff, now));
}

/** SQLite mode: the file at DATABASE_PATH, synchronously (the promise is already settled). */
function pruneSqliteFile(config: Config, cutoff: Date, now: Date): PruneReport {
  openReadOnly(config).close(); // one clear line when the database is missing or not migrated
  const store = openStore(config.databasePath, {
    busyTimeoutMs: Math.max(config.sqlite.busyTimeoutMs, 5000),
  });
  try {
    const summary = pruneSqlite(store.db, cutoff, now);
    return { json: summary, lines: summaryLines(summary) };
  } finally {
    store.close();
  }
}

function summaryLines(s: PruneSummary): string[] {
  return [
    `removed the bodies of ${s.pruned} finished event(s) received before ${s.cutoff} (rows and dedup keys kept)`,
    `removed ${s.forwarded} forwarded message(s) created before then and delivered to every destination`,
  ];
}

/**
 * Cluster mode: PostgreSQL first, in its short transactions (pg-retention.ts; an unreachable server
 * is one line naming host, port and database, and nothing is touched), then the local spool. The
 * JSON has SQLite mode's keys, and `spool`: what left the spool, or null when there is none here.
 */
async function pruneCluster(
  config: Config,
  databaseUrl: string,
  cutoff: Date,
  now: Date,
): Promise<PruneReport> {
  // Checked before PostgreSQL is touched: a spool that cannot be opened stops the command first.
  const hasSpool = existsSync(config.databasePath);
  if (hasSpool) openReadOnly(config).close();
  const summary = await withPgConnection(
    databaseUrl,
    (client) => prunePostgres(transactionOn(client), cutoff, now),
    'consig-receiver prune',
  );
  const spool = hasSpool ? pruneLocalSpool(config, cutoff) : null;
  return {
    json: { ...summary, spool },
    lines: [
      `PostgreSQL ${describePgTarget(pgTarget(databaseUrl))}:`,
      ...summaryLines(summary),
      spool === null
        ? `no spool at ${config.databasePath}: only PostgreSQL was pruned`
        : `spool ${config.databasePath}: removed ${spool.deliveries} relayed delivery row(s) and ${spool.events} event(s) received before then (rows not relayed yet kept)`,
    ],
  };
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
