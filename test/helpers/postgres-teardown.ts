import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { stopLocalPostgresIn } from '../../rigs/local-postgres';
import { RUN_DIR_ENV } from './postgres';

/** jest's globalTeardown for the tiers on PostgreSQL: stops every worker's server, once the run is over. */
export default async function tearDown(): Promise<void> {
  const runDir = process.env[RUN_DIR_ENV];
  if (!runDir) return;
  delete process.env[RUN_DIR_ENV];
  const records = readdirSync(runDir).filter((f) => /^worker-\d+\.json$/.test(f));
  await Promise.all(
    records.map((f) =>
      stopLocalPostgresIn((JSON.parse(readFileSync(join(runDir, f), 'utf8')) as { dir: string }).dir),
    ),
  );
  rmSync(runDir, { recursive: true, force: true });
}
