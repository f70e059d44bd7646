import { spawn } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { openDatabase } from '../../src/store/database';
import { loadMigrations, migrate } from '../../src/store/migrate';
import { BIN, type RunResult } from '../helpers/process';
import { tempDir } from '../helpers/tmp';

/**
 * An unusable database stops `serve` and `migrate` at once with one line naming the file and the
 * cause (issue 10, item 4), instead of listening, answering /healthz 200 and every delivery 503.
 *
 * Root ignores file permissions, and CI runs as root: there the commands run as `nobody`
 * (uid/gid 65534). The temp directory is opened to it (mkdtemp makes it 0700), and dist/ and
 * node_modules/ must be readable by it, which the control case below proves. Any other user is
 * subject to permissions already and runs the commands as itself.
 */

const ROOT = process.getuid?.() === 0;
const NOBODY = 65534;
const asUser = ROOT ? { uid: NOBODY, gid: NOBODY } : {};

let tmp: ReturnType<typeof tempDir>;
beforeAll(() => {
  tmp = tempDir('consig-startup-');
  chmodSync(tmp.dir, 0o755);
});
afterAll(() => tmp.cleanup());

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
    const child = spawn(process.execPath, [BIN, ...args], {
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
    // The unprivileged user cannot run node or read dist/ (a private temp directory above them):
    // say so at once instead of waiting for the test's timeout.
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(
        new Error(
          `cannot run ${process.execPath} as uid ${NOBODY}: ${err.message} (every directory above the checkout needs o+x, as .ci/run sets)`,
        ),
      );
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
