import { existsSync } from 'node:fs';
import type { Config } from './config';
import { StorageError } from './domain/errors';
import type { SpoolVerdict } from './domain/relay-gap';
import { withPgCommandStore } from './postgres/pg-port';
import { knownSpools, verifySpool } from './postgres/pg-reads';
import { openSpool } from './sqlite/spool';
import { openStore } from './sqlite/store';
import type { PostgresTarget } from './store-factory';

/** What `relay verify` compares: each spool file's verdict, and every spool PostgreSQL knows. */
export interface SpoolsVerified {
  database: string;
  verdicts: (SpoolVerdict & { path: string })[];
  known: { spool: string; replica: string; relayed_through: number }[];
}

/**
 * `relay verify` (cluster mode): the spool files at `paths` (default DATABASE_PATH, the spool of a
 * replica run beside this command) read in one snapshot each, then compared with PostgreSQL.
 */
export async function verifySpools(
  config: Config,
  target: PostgresTarget,
  paths: readonly string[],
): Promise<SpoolsVerified> {
  const files = paths.length > 0 ? paths : [target.databasePath];
  const facts = files.map((path) => {
    if (!existsSync(path)) throw new StorageError(`no spool at ${path}`);
    const store = openStore(path, { readonly: true, busyTimeoutMs: config.sqlite.busyTimeoutMs });
    try {
      return { path, facts: openSpool(store.db).facts() };
    } finally {
      store.close();
    }
  });
  const none = () => ({ path: target.databasePath, prune: null });
  return withPgCommandStore(
    target.cluster.databaseUrl,
    { access: 'read', command: 'relay-verify' },
    none,
    (port) =>
      port.sql.read(async (q) => {
        const verdicts: SpoolsVerified['verdicts'] = [];
        for (const f of facts) verdicts.push({ path: f.path, ...(await verifySpool(q, f.facts)) });
        return { database: port.name, verdicts, known: await knownSpools(q) };
      }),
  );
}
