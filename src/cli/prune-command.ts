import type { Config } from '../config';
import { UsageError } from '../domain/errors';
import { pruneBodies, pruneForwarded, retentionCutoff } from '../store/retention';
import { openStore } from '../store/store';
import { openReadOnly, type Output } from './log-commands';

/** `prune [--days N]`: what RETENTION_DAYS does in `serve`, on demand. */
export function pruneCommand(config: Config, opts: { days?: string; json?: boolean }, io: Output): void {
  const days = opts.days === undefined ? config.retentionDays : Number(opts.days);
  if (days === undefined) throw new UsageError('prune needs --days N (or RETENTION_DAYS)');
  if (!Number.isSafeInteger(days) || days < 1)
    throw new UsageError(`--days expects a whole number ≥ 1, got "${opts.days}"`);
  openReadOnly(config).close(); // one clear line when the database is missing or not migrated
  const store = openStore(config.databasePath, {
    busyTimeoutMs: Math.max(config.sqlite.busyTimeoutMs, 5000),
  });
  try {
    const now = new Date();
    const cutoff = retentionCutoff(now, days);
    const { pruned } = pruneBodies(store.db, cutoff, now);
    const forwarded = pruneForwarded(store.db, cutoff).pruned;
    if (opts.json) return io.out(JSON.stringify({ pruned, forwarded, cutoff: cutoff.toISOString() }));
    io.out(
      `removed the bodies of ${pruned} finished event(s) received before ${cutoff.toISOString()} (rows and dedup keys kept)`,
    );
    io.out(
      `removed ${forwarded} forwarded message(s) created before then and delivered to every destination`,
    );
  } finally {
    store.close();
  }
}
