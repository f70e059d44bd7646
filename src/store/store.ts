import { MigrationError, StorageError } from '../domain/errors';
import { type Db, type OpenOptions, openDatabase } from './database';
import { averbacoesRepo } from './averbacoes-repo';
import { deliveriesRepo } from './deliveries-repo';
import { eventsRepo } from './events-repo';
import { proposalsRepo } from './proposals-repo';
import { assertKnown, loadMigrations, type Migration, migrate } from './migrate';

/** The SQLite log: one file, its repositories, and the checks /readyz needs. */
export type Store = ReturnType<typeof buildStore>;

export interface OpenStoreOptions extends OpenOptions {
  /** Apply pending migrations (serve, migrate). Otherwise a database behind the code is refused. */
  migrate?: boolean;
  migrations?: readonly Migration[];
}

export function openStore(path: string, options: OpenStoreOptions = {}) {
  const migrations = options.migrations ?? loadMigrations();
  const db = openDatabase(path, options);
  try {
    if (options.migrate) migrate(db, migrations);
    const applied = assertKnown(db, migrations);
    if (applied.length < migrations.length) {
      throw new MigrationError(
        `the database at ${path} is not migrated (${applied.length} of ${migrations.length} migrations applied): run \`consig-receiver migrate\``,
      );
    }
  } catch (err) {
    db.close();
    throw err;
  }
  return buildStore(db, path, migrations.length);
}

function buildStore(db: Db, path: string, expectedVersions: number) {
  const probe = db.readonly ? null : db.prepare('UPDATE health_probe SET checked_at = ? WHERE id = 1');
  const versions = db.prepare<[], { n: number }>('SELECT count(*) AS n FROM schema_migrations');
  return {
    db,
    path,
    events: eventsRepo(db),
    deliveries: deliveriesRepo(db),
    proposals: proposalsRepo(db),
    averbacoes: averbacoesRepo(db),
    /** Proves the database is open, migrated and takes a write; throws StorageError otherwise. */
    probeWrite(now: Date): void {
      try {
        if (!db.open) throw new Error('database is closed');
        if (probe === null) throw new Error('database is open read-only');
        const n = versions.get()?.n ?? 0;
        if (n !== expectedVersions) throw new Error(`schema has ${n} of ${expectedVersions} migrations`);
        probe.run(now.toISOString());
      } catch (err) {
        throw new StorageError((err as Error).message, { cause: err });
      }
    },
    close(): void {
      if (db.open) db.close();
    },
  };
}
