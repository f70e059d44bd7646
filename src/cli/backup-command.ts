import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type { Config } from '../config';
import { UsageError } from '../domain/errors';
import type { Output } from './log-commands';
import { backupDatabase } from '../open-store';

/**
 * `backup <file>`: a consistent online copy of the database while the receiver runs, with SQLite's
 * online backup API (pages are copied in steps; writes that happen meanwhile restart the copy of
 * what changed, so the result is one consistent snapshot). The copy is a plain SQLite file, owner
 * only (0600), as the log is.
 */
export async function backupCommand(
  config: Config,
  file: string,
  opts: { force?: boolean; json?: boolean },
  io: Output,
): Promise<void> {
  const target = resolve(file);
  if (target === resolve(config.databasePath))
    throw new UsageError('the backup file must not be the database itself');
  if (existsSync(target) && !opts.force) throw new UsageError(`${target} exists (use --force to overwrite)`);
  if (!existsSync(dirname(target))) throw new UsageError(`directory ${dirname(target)} does not exist`);
  const started = performance.now();
  const result = await backupDatabase(config, target);
  const ms = Math.round(performance.now() - started);
  if (opts.json) return io.out(JSON.stringify({ file: target, pages: result.totalPages, ms }));
  io.out(`backed up ${config.databasePath} to ${target}: ${result.totalPages} pages in ${ms} ms`);
}
