import { MigrationError } from './errors';
import { migrationFileName } from './migration-files';

/**
 * Mixed versions on one PostgreSQL (issue 46, item 1): each migration of `migrations-pg/` says
 * whether the previous release runs on the schema it makes (expand/contract). A replica whose code
 * knows fewer migrations than the database has runs when every migration it does not know says
 * `previous`, and refuses otherwise. Pure: the runner (postgres/pg-migrate.ts) reads the files and
 * `schema_migrations`.
 *
 * - `previous`: additive and harmless to the release before (a new table, a nullable column, an
 *   index): that release's code reads and writes what it always did, and nothing it skips matters;
 * - `breaking`: anything that release would mis-handle (a NOT NULL it does not fill, a changed
 *   meaning, an ordering column it does not write, a constraint it relied on dropped).
 */
export type Compat = 'previous' | 'breaking';

/**
 * The files released before issue 46 never change (their checksums are recorded), so they carry no
 * `-- compat:` line: their compat is this list, each with why, read from the file.
 */
export const RELEASED_COMPAT: Readonly<Record<number, { compat: Compat; reason: string }>> = {
  1: {
    compat: 'breaking',
    reason: 'the first cluster schema: no release before it runs on PostgreSQL at all',
  },
  2: {
    compat: 'breaking',
    reason:
      "drops deliveries' UNIQUE (replica, spool_id), the conflict target of the previous release's relay insert",
  },
  3: {
    compat: 'breaking',
    reason:
      'the outbox: events processed by the previous release would write no forwarded messages, so destinations and the feed would miss them',
  },
  4: {
    compat: 'previous',
    reason:
      'console tables, an index, a function and averbacoes.seq (filled by its default): nothing the previous release reads or writes changes',
  },
  5: {
    compat: 'previous',
    reason:
      'a new table and nullable or defaulted columns of the console; sessions it opened end at the next sign-in, nothing is mis-written',
  },
  6: {
    compat: 'breaking',
    reason:
      'relay_spools gets NOT NULL heartbeat columns the previous relay does not fill, and turns order by received_at up to a watermark it does not publish',
  },
  7: {
    compat: 'previous',
    reason:
      "ids come from consig_next_id() through the columns' defaults, which the previous release's inserts use unchanged; a new table it never reads",
  },
  8: {
    compat: 'breaking',
    reason:
      "events.order_at orders a key's events from now on: the previous relay does not write it, so what it relays is ordered on another clock",
  },
  9: {
    compat: 'previous',
    reason: 'nullable columns of the console sessions and audit, which it never reads',
  },
  10: {
    compat: 'previous',
    reason: 'nullable trace_context columns: events it relays and messages it writes simply have none',
  },
  11: {
    compat: 'previous',
    reason: 'a new table (console_keys) that nothing of the previous release reads or writes',
  },
};

/** The last migration released before files had to say their compat (0011_console_keys.sql). */
export const LAST_UNMARKED = 11;

// The first line of the text, whole: the pattern stops at its end (a newline, or the end of the text).
const LINE = /^-- compat: (previous|breaking)[ \t]*\r?(?:\n|$)/;

/** The compat a file's first line declares; null when that line is not a compat line. */
export function declaredCompat(sql: string): Compat | null {
  const m = LINE.exec(sql);
  return m ? (m[1] as Compat) : null;
}

/**
 * The compat of a migration file: the list above for 0001–0011, the file's first line after them.
 * Throws MigrationError naming the file and what its first line must say.
 */
export function migrationCompat(m: { version: number; name: string; sql: string }): Compat {
  const listed = RELEASED_COMPAT[m.version];
  // The list holds 0001–0011 only (LAST_UNMARKED): a later file always says it on its first line.
  if (listed !== undefined) return listed.compat;
  const declared = declaredCompat(m.sql);
  if (declared !== null) return declared;
  throw new MigrationError(
    `migrations-pg/${migrationFileName(m)} must start with the line "-- compat: previous" (the previous release runs on this schema) or "-- compat: breaking" (it does not); see docs/cluster-mode.md#upgrades-and-mixed-versions`,
  );
}

/** A row of `schema_migrations` as the decision needs it; compat null: not recorded. */
export interface AppliedCompat {
  version: number;
  name: string;
  compat: string | null;
}

/** What a replica does on the schema it finds. */
export type SchemaVerdict =
  | { kind: 'current' }
  /** Migrations this code has that the database lacks (MIGRATE_ON_START=false leaves them). */
  | { kind: 'behind'; missing: string[]; message: string }
  /** Newer migrations, all `previous`: run on it, and say so once. */
  | { kind: 'newer'; message: string }
  /** Newer migrations, at least one breaking (or unrecorded): refuse. */
  | { kind: 'refused'; message: string };

const pad = (v: number): string => String(v).padStart(4, '0');
/** `0013_x`: a migration as the messages name it. */
const label = (m: { version: number; name: string }): string => `${pad(m.version)}_${m.name}`;

/**
 * Run or refuse, given what the database recorded and the migrations this code knows. Unknown
 * versions that are all recorded `previous` run; any other (breaking, or recorded by no runner
 * that knew compat) refuses. A database behind is `behind` (the caller migrates it, or refuses
 * while MIGRATE_ON_START=false).
 */
export function schemaVerdict(
  applied: readonly AppliedCompat[],
  known: readonly { version: number; name: string }[],
): SchemaVerdict {
  const knownVersions = new Set(known.map((m) => m.version));
  const codeAt = known.reduce((n, m) => Math.max(n, m.version), 0);
  const unknown = applied.filter((a) => !knownVersions.has(a.version));
  if (unknown.length > 0) {
    const dbAt = unknown.reduce((n, a) => Math.max(n, a.version), 0);
    const breaking = unknown.filter((a) => a.compat !== 'previous').map(label);
    const versions = `the PostgreSQL schema is at ${pad(dbAt)}`;
    const mine = `this replica's code knows up to ${pad(codeAt)}`;
    if (breaking.length === 0)
      return {
        kind: 'newer',
        message: `${versions} (${unknown.map(label).join(', ')} previous); ${mine}: running on it, as every newer migration says the previous release runs on it`,
      };
    return {
      kind: 'refused',
      message: `${versions} (${breaking.join(', ')} breaking); ${mine}: this replica refuses it (not ready, webhooks 503) — run the release that migrated it`,
    };
  }
  const done = new Set(applied.map((a) => a.version));
  const missing = known.filter((m) => !done.has(m.version)).map(label);
  if (missing.length === 0) return { kind: 'current' };
  return {
    kind: 'behind',
    missing,
    message: `the PostgreSQL schema lacks ${missing.join(', ')}, which this replica needs; run \`consig-receiver migrate\` (MIGRATE_ON_START=false: replicas do not migrate)`,
  };
}

/** A replica that takes no delivery for now: the webhook 503's `error`, and why. */
export interface SchemaHold {
  error: 'schema_incompatible' | 'schema_migrating' | 'schema_unread';
  message: string;
}

/** What a replica knows of PostgreSQL's schema, for its webhook routes (ClusterNode). */
export interface SchemaState {
  /** Why it refuses the schema (newer and breaking, or behind without migrating); null: it does not. */
  refusal: string | null;
  /** Migrating at start, or waiting for another runner's lock. */
  migrating: boolean;
  /** It has read the schema in this run (and runs on it). */
  read: boolean;
  /** Its last try to reach PostgreSQL failed (not a migration's failure: PostgreSQL did not answer). */
  unreachable: boolean;
  /** Since the replica started, and CLUSTER_HOLDBACK_MAX_MS. */
  sinceStartMs: number;
  holdbackMaxMs: number;
}

/**
 * Whether the webhook routes answer 503 now instead of acknowledging (issue 46), and why: a
 * delivery acknowledged into the spool of a replica that then refuses the schema, or that relays it
 * only after a long migration, reaches PostgreSQL after later events of its proposal were processed
 * by the others. So: refused, migrating, or not read yet — except while PostgreSQL cannot be reached
 * (a fleet restarted in an outage must take the service's deliveries, and its spools keep them), and
 * once CLUSTER_HOLDBACK_MAX_MS has passed since the start without an answer either way, as `/readyz`.
 */
export function schemaHold(s: SchemaState): SchemaHold | null {
  if (s.refusal !== null) return { error: 'schema_incompatible', message: s.refusal };
  if (s.migrating)
    return {
      error: 'schema_migrating',
      message: "it is migrating PostgreSQL's schema, or waiting for another replica's migration",
    };
  if (!s.read && !s.unreachable && s.sinceStartMs < s.holdbackMaxMs)
    return {
      error: 'schema_unread',
      message: "it has not read PostgreSQL's schema yet (it is starting)",
    };
  return null;
}
