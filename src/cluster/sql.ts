import type { Pool, PoolClient } from 'pg';
/**
 * The one shape cluster mode's SQL runs through: a pg Pool, a PoolClient inside a transaction, or
 * the transaction pg-boss hands a transactional worker. Parameterised queries only.
 */
export interface Sql {
  query<R>(text: string, values?: readonly unknown[]): Promise<R[]>;
}

/** A node-postgres Pool or Client as a {@link Sql}. */
export function sqlOf(client: {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}): Sql {
  return {
    query: async <R>(text: string, values?: readonly unknown[]) =>
      (await client.query(text, values === undefined ? undefined : [...values])).rows as R[],
  };
}

/** pg-boss's database shape (`executeSql`), for its `db` option: its writes join our transaction. */
export interface BossDb {
  executeSql(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

export function bossDbOf(sql: Sql): BossDb {
  return { executeSql: async (text, values) => ({ rows: await sql.query(text, values) }) };
}

export function sqlOfBossDb(db: BossDb): Sql {
  return {
    query: async <R>(text: string, values?: readonly unknown[]) =>
      (await db.executeSql(text, values ? [...values] : undefined)).rows as R[],
  };
}

/** ISO-8601 text as the SQLite log holds it (and node-postgres returns Date for timestamptz). */
export function iso(value: Date | string | null): string | null {
  if (value === null) return null;
  return value instanceof Date ? value.toISOString() : new Date(value).toISOString();
}

/** nu_proposta is text in PostgreSQL; the domain sees numbers as numbers, as SQLite hands them over. */
export function canonicalNu(nu: string): number | string {
  return /^-?\d{1,15}$/.test(nu) && String(Number(nu)) === nu ? Number(nu) : nu;
}

const guarded = new WeakSet<object>();

/**
 * A client from `pool` that cannot take the process down. node-postgres removes the pool's 'error'
 * listener from a client while it is checked out; a connection dropped then (PostgreSQL restarted,
 * a failover) emits 'error' with no listener, an uncaught exception. The query in flight still
 * fails and its caller handles that; this listener only keeps the 'error' event from being fatal.
 */
export async function checkOut(pool: Pool): Promise<PoolClient> {
  const client = await pool.connect();
  if (!guarded.has(client)) {
    guarded.add(client);
    client.on('error', () => undefined);
  }
  return client;
}
