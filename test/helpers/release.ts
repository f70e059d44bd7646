import { spawnSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join, resolve } from 'node:path';

/**
 * The builds the upgrade tier runs side by side (issue 46 item 5): the previous release, named in
 * test/upgrade/previous-release.json and built by scripts/build-release.sh outside the work tree;
 * this tree's dist/ ("next"); and "next + probe" packages, next with one more PostgreSQL migration.
 * This tree may add no migration over the previous release, yet the scenarios are about a release
 * that does: the probe is that migration, marked `-- compat: previous` or `-- compat: breaking`.
 */

export const REPO = resolve(__dirname, '..', '..');
export const PREVIOUS_RELEASE_FILE = join(REPO, 'test', 'upgrade', 'previous-release.json');

/** A package of the receiver: its root (dist/, migrations/, migrations-pg/) and what it is. */
export interface Release {
  /** How the tables name it: `4791991`, `next+breaking`. */
  readonly name: string;
  readonly dir: string;
  /** Its CLI: `node <bin> serve`, `node <bin> migrate`. */
  readonly bin: string;
  /** The highest PostgreSQL migration it knows (as `/readyz` names versions: 4 digits). */
  readonly pgVersion: string;
}

/** The commit to upgrade from: UPGRADE_FROM, else the file's. */
export function previousCommit(env: NodeJS.ProcessEnv = process.env): string {
  if (env.UPGRADE_FROM) return env.UPGRADE_FROM;
  const file = JSON.parse(readFileSync(PREVIOUS_RELEASE_FILE, 'utf8')) as { commit?: unknown };
  if (typeof file.commit !== 'string' || !/^[0-9a-f]{40}$/.test(file.commit))
    throw new Error(`${PREVIOUS_RELEASE_FILE}: "commit" must be a full 40-character commit id`);
  return file.commit;
}

/**
 * What the previous release is known to get wrong (previous-release.json `defects`, each with why):
 * for the file's commit only, none under UPGRADE_FROM (a measurement takes a release as it is).
 */
export function previousDefects(env: NodeJS.ProcessEnv = process.env): string[] {
  if (env.UPGRADE_FROM) return [];
  const file = JSON.parse(readFileSync(PREVIOUS_RELEASE_FILE, 'utf8')) as {
    defects?: Record<string, string>;
  };
  return Object.keys(file.defects ?? {});
}

/** `commit` built by scripts/build-release.sh (reused when already built); throws with its output when it fails. */
export function buildRelease(commit: string): Release {
  const run = spawnSync('bash', [join(REPO, 'scripts', 'build-release.sh'), commit], {
    cwd: REPO,
    encoding: 'utf8',
    env: { ...process.env },
    timeout: 900_000,
  });
  const dir = run.stdout.trim().split('\n').at(-1) ?? '';
  if (run.status !== 0 || !existsSync(join(dir, 'dist', 'src', 'cli', 'bin.js')))
    throw new Error(
      `scripts/build-release.sh ${commit} failed (exit ${run.status}):\n${run.stderr.slice(-3000)}`,
    );
  return packageAt(commit.slice(0, 7), dir);
}

/** This tree's build (`npm run build` first). */
export function nextRelease(): Release {
  if (!existsSync(join(REPO, 'dist', 'src', 'cli', 'bin.js')))
    throw new Error('dist/ is missing: `npm run build` first (the upgrade tier runs the built receiver)');
  return packageAt('next', REPO);
}

function packageAt(name: string, dir: string): Release {
  const bin = join(dir, 'dist', 'src', 'cli', 'bin.js');
  return { name, dir, bin, pgVersion: highest(join(dir, 'migrations-pg')) };
}

/** The highest `NNNN` of a migration folder, as 4 digits. */
function highest(folder: string): string {
  const versions = readdirSync(folder)
    .map((f) => /^(\d{4})_.*\.sql$/.exec(f)?.[1])
    .filter((v): v is string => v !== undefined)
    .sort();
  const last = versions.at(-1);
  if (last === undefined) throw new Error(`${folder} holds no migration`);
  return last;
}

export type ProbeKind = 'previous' | 'breaking';

/** One migration file a probe adds; numbered after next's last, in the order of the list. */
interface ProbeFile {
  name: string;
  sql: string;
}

/**
 * What a release changing the schema could ship: a new table, and a nullable column on the hot
 * table, `events` — its ALTER takes events' ACCESS EXCLUSIVE lock for a moment, so it meets the
 * relays' inserts and a long read (scenario c). No `lock_timeout` of its own: what the migration
 * runner does about locks (issue 46 item 2) is what the tier tests. The same statements for both
 * kinds, so that the first line alone makes the difference.
 */
const PROBE_STATEMENTS = [
  "-- The upgrade tier's probe migration (test/helpers/release.ts): a new table and a nullable",
  '-- column on events, as a release changing the schema could ship.',
  'CREATE TABLE upgrade_probe (',
  '  id       bigint      PRIMARY KEY,',
  '  noted_at timestamptz NOT NULL DEFAULT now()',
  ');',
  'ALTER TABLE events ADD COLUMN upgrade_probe text;',
  '',
].join('\n');

/**
 * The files of each probe. A file the runner runs outside a transaction (second line
 * `-- migrate: outside-transaction`, one statement: issue 46 item 2) is one more entry, e.g. for
 * `previous`: `outsideTransaction('upgrade_probe_index', 'CREATE INDEX CONCURRENTLY IF NOT EXISTS
 * events_upgrade_probe ON events (upgrade_probe)')`.
 */
const PROBES: Record<ProbeKind, readonly ProbeFile[]> = {
  previous: [{ name: 'upgrade_probe', sql: `-- compat: previous\n${PROBE_STATEMENTS}` }],
  breaking: [{ name: 'upgrade_probe', sql: `-- compat: breaking\n${PROBE_STATEMENTS}` }],
};

/** A migration of one statement, run outside a transaction (`CREATE INDEX CONCURRENTLY`). */
export function outsideTransaction(name: string, statement: string): ProbeFile {
  return { name, sql: `-- compat: previous\n-- migrate: outside-transaction\n${statement};\n` };
}

/** A SQLite migration for the spool beside the probe, as a release changing the schema writes it for both stores. */
const SPOOL_PROBE: ProbeFile = {
  name: 'upgrade_probe',
  sql: "-- The upgrade tier's probe (test/helpers/release.ts): what a release's SQLite half adds.\nCREATE TABLE upgrade_probe (id INTEGER PRIMARY KEY, noted_at TEXT);\n",
};

/**
 * A copy of `next` (dist/, migrations/, migrations-pg/, package.json; node_modules by a symlink) in
 * `parent` with the probe's PostgreSQL migration(s) after its last; with `spool`, also a SQLite
 * migration after the last of migrations/ (which every replica applies to its spool).
 */
export function probePackage(
  next: Release,
  kind: ProbeKind,
  parent: string,
  options: { spool?: boolean } = {},
): Release {
  const name = `next+${kind}${options.spool ? '+spool' : ''}`;
  const dir = join(parent, name);
  mkdirSync(dir, { recursive: true });
  for (const part of ['dist', 'migrations', 'migrations-pg', 'package.json'])
    cpSync(join(next.dir, part), join(dir, part), { recursive: true });
  symlinkSync(join(REPO, 'node_modules'), join(dir, 'node_modules'));
  addMigrations(join(dir, 'migrations-pg'), PROBES[kind]);
  if (options.spool) addMigrations(join(dir, 'migrations'), [SPOOL_PROBE]);
  return packageAt(name, dir);
}

function addMigrations(folder: string, files: readonly ProbeFile[]): void {
  let version = Number(highest(folder));
  for (const f of files) {
    version += 1;
    writeFileSync(join(folder, `${String(version).padStart(4, '0')}_${f.name}.sql`), f.sql);
  }
}

/** What a file of the upgrade tier runs: the previous release, this tree, and this tree with each probe. */
export interface UpgradeReleases {
  previous: Release;
  next: Release;
  /** next + a `-- compat: previous` migration: the previous release runs on its schema. */
  compatible: Release;
  /** next + a `-- compat: breaking` migration: the previous release refuses its schema. */
  breaking: Release;
  /**
   * The old replica the restart scenarios (b2, d2) restart on a schema it must refuse: the previous
   * release, or this tree's own build when the previous one is known to acknowledge before it has
   * read the schema (`defects`): what those scenarios check is then what the next upgrade relies on.
   */
  restarted: Release;
}

/** Builds (or reuses) the previous release and makes the probe packages under `dir`. */
export function upgradeReleases(dir: string): UpgradeReleases {
  const previous = buildRelease(previousCommit());
  const next = nextRelease();
  const early = previousDefects().includes('acknowledges-before-schema-check');
  return {
    previous,
    next,
    restarted: early ? next : previous,
    compatible: probePackage(next, 'previous', dir),
    breaking: probePackage(next, 'breaking', dir),
  };
}
