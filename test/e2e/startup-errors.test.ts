import { spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  copyFileSync,
  cpSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  writeFileSync,
} from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { openDatabase } from '../../src/sqlite/database';
import { loadMigrations, migrate } from '../../src/sqlite/sqlite-migrate';
import { BIN, type RunResult } from '../helpers/process';
import { tempDir } from '../helpers/tmp';

/**
 * An unusable database stops `serve` and `migrate` at once with one line naming the file and the
 * cause (issue 10, item 4), instead of listening, answering /healthz 200 and every delivery 503.
 *
 * Root ignores file permissions, and CI runs as root: there the commands run as `nobody`
 * (uid/gid 65534). The temp directory is opened to it (mkdtemp makes it 0700). When `nobody` cannot
 * run node or the built CLI where they are (a checkout under a directory only root may enter, such
 * as /root), they are copied into the temp directory first: dist/, the migrations and
 * package.json, with node_modules hard-linked (copied across file systems). The control case
 * below proves the user runs them. Any other user is subject to permissions already and runs the
 * commands as itself, in place.
 */

const ROOT = process.getuid?.() === 0;
const NOBODY = 65534;
const asUser = ROOT ? { uid: NOBODY, gid: NOBODY } : {};

const REPO = resolve(__dirname, '../..');

let tmp: ReturnType<typeof tempDir>;
/** The node and the CLI the user runs: the checkout's, or copies it can reach. */
let node = process.execPath;
let bin = BIN;
beforeAll(() => {
  tmp = tempDir('consig-startup-');
  chmodSync(tmp.dir, 0o755);
  if (!ROOT) return;
  if (!runsAsUser(node, ['-e', ''])) node = stageNode();
  if (!runsAsUser(node, [bin, '--version'])) bin = stageApp();
});
afterAll(() => tmp.cleanup());

/** Whether the unprivileged user runs `file args` to a clean exit. */
function runsAsUser(file: string, args: string[]): boolean {
  const r = spawnSync(file, args, { ...asUser, cwd: tmp.dir, stdio: 'ignore', timeout: 30_000 });
  return r.error === undefined && r.status === 0;
}

/** A copy of this node, where the user can run it (a copy: a link would share the original's mode). */
function stageNode(): string {
  const target = join(tmp.dir, 'node');
  copyFileSync(process.execPath, target);
  chmodSync(target, 0o755);
  return target;
}

/** What the built CLI needs at run time, where the user can read it; returns its entry point. */
function stageApp(): string {
  const app = join(tmp.dir, 'app');
  for (const part of ['dist', 'migrations', 'migrations-pg', 'package.json'])
    cpSync(join(REPO, part), join(app, part), { recursive: true });
  const modules = realpathSync(join(REPO, 'node_modules'));
  const linked = spawnSync('cp', ['-al', modules, join(app, 'node_modules')], { encoding: 'utf8' });
  if (linked.status !== 0) cpSync(modules, join(app, 'node_modules'), { recursive: true });
  const staged = join(app, relative(REPO, BIN));
  if (!runsAsUser(node, [staged, '--version']))
    throw new Error(`uid ${NOBODY} cannot run the CLI even from a copy in ${app}: is ${tmp.dir} reachable?`);
  return staged;
}

/** A directory the command's user may write. */
function userDir(name: string): string {
  const dir = join(tmp.dir, name);
  mkdirSync(dir);
  if (ROOT) chownSync(dir, NOBODY, NOBODY);
  return dir;
}

/** A directory the command's user may read but not write (root's 0755, or our own 0555). */
function readOnlyDir(name: string): string {
  const dir = join(tmp.dir, name);
  mkdirSync(dir, { mode: 0o755 });
  if (!ROOT) chmodSync(dir, 0o555);
  return dir;
}

/** A migrated database, written here (as root in CI), then given to the command's user. */
function migratedFile(path: string, mode: number): void {
  const db = openDatabase(path);
  migrate(db, loadMigrations());
  db.close();
  if (ROOT) chownSync(path, NOBODY, NOBODY);
  chmodSync(path, mode);
}

/** Runs a command as the unprivileged user; kills it if it is still running after `timeoutMs`. */
function run(args: string[], timeoutMs = 30_000): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(node, [bin, ...args], {
      ...asUser,
      cwd: tmp.dir,
      env: {
        PATH: process.env.PATH ?? '',
        HOST: '127.0.0.1',
        PORT: '0',
        WEBHOOK_SECRETS: 'startup-test-secret-0123456789',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${node} as uid ${NOBODY}: ${err.message}`));
    });
    child.once('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

interface Case {
  name: string;
  /** Prepares the file; returns its path. */
  setUp: (dir: string) => string;
  /** What the line must say besides the file's path. */
  says: (path: string, dir: string) => string[];
  dir: (name: string) => string;
}

const cases: Case[] = [
  {
    name: 'a read-only database file',
    dir: userDir,
    setUp: (dir) => {
      const path = join(dir, 'consig.db');
      migratedFile(path, 0o444);
      return path;
    },
    says: () => ['cannot write the database', 'the file is not writable by this user', 'mode 0444'],
  },
  {
    name: 'a writable file in a read-only directory',
    dir: readOnlyDir,
    setUp: (dir) => {
      const path = join(dir, 'consig.db');
      migratedFile(path, 0o644);
      return path;
    },
    says: (_path, dir) => [
      `the directory ${dir} is not writable by this user`,
      'SQLite needs to create consig.db-wal beside it',
    ],
  },
  {
    name: 'no file, in a read-only directory',
    dir: readOnlyDir,
    setUp: (dir) => join(dir, 'consig.db'),
    says: (_path, dir) => [
      `the directory ${dir} is not writable by this user`,
      'SQLite needs to create consig.db there',
    ],
  },
  {
    name: 'a file that is not a database',
    dir: userDir,
    setUp: (dir) => {
      const path = join(dir, 'consig.db');
      writeFileSync(path, Buffer.alloc(8192, 'not sqlite '));
      if (ROOT) chownSync(path, NOBODY, NOBODY);
      return path;
    },
    says: () => ['cannot open the database', 'the file is not an SQLite database'],
  },
];

/** The bytes of every file in `dir`: the failed start must leave them all as they were, and add none. */
function snapshot(dir: string): Record<string, string> {
  return Object.fromEntries(readdirSync(dir).map((f) => [f, readFileSync(join(dir, f)).toString('base64')]));
}

describe.each(['serve', 'migrate'])('%s on an unusable database', (command) => {
  it.each(cases.map((c) => [c.name, c] as const))(
    '%s: exits ≠ 0 with one line naming the file',
    async (_name, c) => {
      const dir = c.dir(`${command}-${cases.indexOf(c)}`);
      const path = c.setUp(dir);
      const before = snapshot(dir);

      const result = await run(['--database', path, command]);

      expect(result.status).not.toBe(0);
      expect(result.status).not.toBeNull(); // null: killed by the timeout, i.e. it kept running
      const lines = result.stderr.split('\n').filter((l) => l !== '');
      expect(lines).toHaveLength(1);
      const [line] = lines as [string];
      expect(line.startsWith(`consig-receiver: `)).toBe(true);
      expect(line).toContain(path);
      for (const fragment of c.says(path, dir)) expect(line).toContain(fragment);
      expect(result.stdout).not.toContain('listening');
      expect(snapshot(dir)).toEqual(before);
    },
  );
});

describe('the same user on a usable database (control)', () => {
  it('migrate succeeds: the user can run the built CLI, so the failures above are the database', async () => {
    const dir = userDir('control');
    const path = join(dir, 'consig.db');

    const result = await run(['--database', path, 'migrate']);

    expect({ status: result.status, stderr: result.stderr }).toEqual({ status: 0, stderr: '' });
    expect(result.stdout).toContain(`${path}: applied 0001_init`);
  });
});
