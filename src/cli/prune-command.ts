import type { Config } from '../config';
import { UsageError } from '../domain/errors';
import { type PruneSummary, retentionCutoff, type SpoolPruneSummary } from '../domain/retention';
import type { PruneOutcome } from '../core/store-port';
import { withCommandStore } from '../open-store';
import type { Output } from './log-commands';

/**
 * `prune [--days N]`: what RETENTION_DAYS does in `serve`, on demand, on the command log's port
 * (src/open-store.ts chooses the store). In cluster mode (DATABASE_URL) it prunes PostgreSQL, and
 * then the spool at DATABASE_PATH when there is one (a command run beside a replica). The rule,
 * the cutoff and the batches are domain/retention.ts's in both.
 */
export async function pruneCommand(
  config: Config,
  opts: { days?: string; json?: boolean },
  io: Output,
): Promise<void> {
  const days = opts.days === undefined ? config.retentionDays : Number(opts.days);
  if (days === undefined) throw new UsageError('prune needs --days N (or RETENTION_DAYS)');
  if (!Number.isSafeInteger(days) || days < 1)
    throw new UsageError(`--days expects a whole number ≥ 1, got "${opts.days}"`);
  const now = new Date();
  const cutoff = retentionCutoff(now, days);
  // The spool, when there is one, is checked before PostgreSQL is touched (CommandSession.spool).
  const { name, outcome } = await withCommandStore(
    config,
    { access: 'write', command: 'prune', spool: true },
    async (log) => ({ name: log.name, outcome: await log.prune(cutoff, now) }),
  );
  const report = pruneReport(name, outcome);
  if (opts.json) io.out(JSON.stringify(report.json));
  else for (const line of report.lines) io.out(line);
}

/** What a store's pass removed: the `--json` object and the text lines. */
interface PruneReport {
  json: PruneSummary & { spool?: SpoolPruneSummary | null };
  lines: string[];
}

/**
 * SQLite mode: the file's summary. Cluster mode (a spool is reported): PostgreSQL's, named without
 * the password, then the spool's; the JSON has SQLite mode's keys, and `spool`: what left the
 * spool, or null when there is none here.
 */
function pruneReport(name: string, { summary, spool }: PruneOutcome): PruneReport {
  if (spool === undefined) return { json: summary, lines: summaryLines(summary) };
  const { path, removed } = spool;
  return {
    json: { ...summary, spool: removed },
    lines: [
      `PostgreSQL ${name}:`,
      ...summaryLines(summary),
      removed === null
        ? `no spool at ${path}: only PostgreSQL was pruned`
        : `spool ${path}: removed ${removed.deliveries} relayed delivery row(s) and ${removed.events} event(s) received before then (rows not relayed yet kept)`,
    ],
  };
}

function summaryLines(s: PruneSummary): string[] {
  return [
    `removed the bodies of ${s.pruned} finished event(s) received before ${s.cutoff} (rows and dedup keys kept)`,
    `removed ${s.forwarded} forwarded message(s) created before then and delivered to every destination`,
    `removed the personal data (CPF, employer, CNPJ) of ${s.anonymised} proposal(s) in a final status since before then (ids, statuses, dates, amounts kept)`,
  ];
}
