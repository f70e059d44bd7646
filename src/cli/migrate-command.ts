import type { Config } from '../config';
import type { StoreMigration } from '../migrate-stores';
import { commandStores } from '../open-store';
import type { Output } from './log-commands';

/**
 * `migrate [--dry-run] [--json]` (contract §2, issue 46 item 3): migrating as a step of its own,
 * before a rollout (a Kubernetes Job, a compose service), for replicas run with
 * MIGRATE_ON_START=false. With DATABASE_URL: PostgreSQL first, under the runner's advisory lock
 * (replicas starting at the same time wait for it), then the spool at DATABASE_PATH when that file
 * exists (a Job has no replica's volume: it creates no stray spool; a replica's own spool is
 * migrated by `migrate` run beside it without DATABASE_URL, or at its start). Without DATABASE_URL,
 * the SQLite file, created when missing, as before. `--dry-run` lists what would be applied and
 * changes nothing: PostgreSQL's `schema_migrations` is only read, the SQLite file opened read-only.
 * One line per store, or one JSON object.
 */

export async function migrateCommand(
  config: Config,
  opts: { dryRun?: boolean; json?: boolean },
  io: Output & { err: (text: string) => void },
): Promise<void> {
  const dryRun = opts.dryRun === true;
  // While it waits (another runner's lock, a lock conflict tried again): one line each on stderr,
  // so that a Job's log says why it takes long; stdout keeps the result alone (--json).
  const results = await commandStores(config).migrate(dryRun, (line) =>
    io.err(`consig-receiver migrate: ${line}`),
  );
  if (opts.json) io.out(JSON.stringify({ dryRun, stores: results }));
  else for (const r of results) io.out(lineOf(r, dryRun));
}

function lineOf(r: StoreMigration, dryRun: boolean): string {
  const name = r.store === 'postgres' ? `PostgreSQL ${r.target}` : `SQLite ${r.target}`;
  if (r.skipped !== undefined) return `${name}: skipped, ${r.skipped}`;
  if (r.applied.length === 0) return `${name}: up to date${r.note ? ` (${r.note})` : ''}`;
  const files = r.applied.map((m) => (m.compat ? `${m.file} (${m.compat})` : m.file)).join(', ');
  return `${name}: ${dryRun ? 'would apply' : 'applied'} ${files}`;
}
