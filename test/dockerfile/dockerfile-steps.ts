import { type ChildProcess, spawn } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import { request } from 'node:http';
import { basename, dirname, join, posix } from 'node:path';

/**
 * Just enough of Docker to run a Dockerfile's steps outside Docker (test/dockerfile): parse the
 * instructions, apply a .dockerignore, execute COPY into a directory standing for a stage's root
 * filesystem, and run commands with bounded time and readable failures.
 */

// ---- Dockerfile ----------------------------------------------------------------------------------

export interface Instruction {
  keyword: string;
  args: string;
  line: number;
}

export interface Stage {
  image: string;
  name: string | undefined;
  instructions: Instruction[];
}

/** Instructions grouped by stage; comments dropped, `\` continuations joined (as Docker does). */
export function parseDockerfile(text: string): Stage[] {
  const stages: Stage[] = [];
  const lines = text.split(/\r?\n/);
  let i = 0;
  while (i < lines.length) {
    const startLine = i + 1;
    let current = lines[i] ?? '';
    i++;
    if (/^\s*(#|$)/.test(current)) continue;
    let continued = /\\\s*$/.test(current);
    current = current.replace(/\\\s*$/, '');
    while (continued && i < lines.length) {
      const next = lines[i] ?? '';
      i++;
      if (/^\s*(#|$)/.test(next)) continue; // comment and blank lines inside a continuation are dropped
      continued = /\\\s*$/.test(next);
      current += next.replace(/\\\s*$/, '');
    }
    const m = /^\s*(\S+)\s*(.*)$/s.exec(current);
    if (!m?.[1]) continue;
    const instruction = { keyword: m[1].toUpperCase(), args: (m[2] ?? '').trim(), line: startLine };
    if (instruction.keyword === 'FROM') {
      const from = /^(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?$/i.exec(instruction.args);
      if (!from?.[1]) throw new Error(`Dockerfile line ${startLine}: cannot parse FROM ${instruction.args}`);
      stages.push({ image: from[1], name: from[2], instructions: [] });
      continue;
    }
    const stage = stages[stages.length - 1];
    if (!stage) throw new Error(`Dockerfile line ${startLine}: ${instruction.keyword} before FROM`);
    stage.instructions.push(instruction);
  }
  return stages;
}

/** Splits on unquoted whitespace; honours '…', "…" and backslash escapes. */
export function shellWords(text: string): string[] {
  const words: string[] = [];
  let word = '';
  let inWord = false;
  let quote: string | null = null;
  for (let k = 0; k < text.length; k++) {
    const ch = text[k] as string;
    if (quote) {
      if (ch === quote) quote = null;
      else if (ch === '\\' && quote === '"' && k + 1 < text.length) word += text[++k];
      else word += ch;
    } else if (ch === '"' || ch === "'") {
      quote = ch;
      inWord = true;
    } else if (ch === '\\' && k + 1 < text.length) {
      word += text[++k];
      inWord = true;
    } else if (/\s/.test(ch)) {
      if (inWord) words.push(word);
      word = '';
      inWord = false;
    } else {
      word += ch;
      inWord = true;
    }
  }
  if (inWord) words.push(word);
  return words;
}

/** `ENV a=1 b=2` or the legacy `ENV a 1`. */
export function parseEnv(args: string): Record<string, string> {
  const words = shellWords(args);
  const first = words[0];
  if (first !== undefined && !first.includes('='))
    return { [first]: args.slice(args.indexOf(first) + first.length).trim() };
  const env: Record<string, string> = {};
  for (const w of words) {
    const eq = w.indexOf('=');
    if (eq <= 0) throw new Error(`cannot parse ENV word "${w}" in: ${args}`);
    env[w.slice(0, eq)] = w.slice(eq + 1);
  }
  return env;
}

/** Exec form (JSON array) as is; shell form through `/bin/sh -c`, Docker's default SHELL. */
export function commandArgv(args: string): string[] {
  if (args.trimStart().startsWith('[')) {
    const parsed: unknown = JSON.parse(args);
    if (!Array.isArray(parsed) || !parsed.every((x) => typeof x === 'string') || parsed.length === 0)
      throw new Error(`exec form must be a non-empty JSON array of strings: ${args}`);
    return parsed as string[];
  }
  return ['/bin/sh', '-c', args];
}

export interface CopySpec {
  flags: Record<string, string>;
  sources: string[];
  dest: string;
}

export function parseCopy(args: string): CopySpec {
  const words = shellWords(args);
  const flags: Record<string, string> = {};
  while (words[0]?.startsWith('--')) {
    const flag = (words.shift() as string).slice(2);
    const eq = flag.indexOf('=');
    if (eq === -1) flags[flag] = 'true';
    else flags[flag.slice(0, eq)] = flag.slice(eq + 1);
  }
  const rest = words.join(' ');
  const paths = rest.startsWith('[') ? (JSON.parse(rest) as string[]) : words;
  const dest = paths[paths.length - 1];
  if (paths.length < 2 || dest === undefined)
    throw new Error(`COPY needs a source and a destination: ${args}`);
  return { flags, sources: paths.slice(0, -1), dest };
}

export interface Healthcheck {
  options: Record<string, string>;
  argv: string[];
}

export function parseHealthcheck(args: string): Healthcheck | null {
  const m = /^((?:--\S+\s+)*)(CMD|NONE)\b\s*(.*)$/is.exec(args);
  if (!m) throw new Error(`cannot parse HEALTHCHECK ${args}`);
  if ((m[2] ?? '').toUpperCase() === 'NONE') return null;
  const options: Record<string, string> = {};
  for (const o of shellWords(m[1] ?? '')) {
    const [k, v] = o.slice(2).split('=', 2);
    if (k) options[k] = v ?? 'true';
  }
  return { options, argv: commandArgv(m[3] ?? '') };
}

/** "5s", "1m30s", "300ms" → milliseconds (Docker durations). */
export function durationMs(text: string): number {
  let total = 0;
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
  let matched = '';
  for (let m = re.exec(text); m; m = re.exec(text)) {
    const unit = { ms: 1, s: 1000, m: 60000, h: 3600000 }[m[2] as 'ms' | 's' | 'm' | 'h'];
    total += Number(m[1]) * unit;
    matched += m[0];
  }
  if (matched !== text) throw new Error(`cannot parse duration "${text}"`);
  return total;
}

// ---- .dockerignore -------------------------------------------------------------------------------

interface IgnoreRule {
  negate: boolean;
  re: RegExp;
}

/** Docker's pattern syntax (moby/patternmatcher): `*`, `?`, `[…]`, `**`, `!` exceptions. */
function patternToRegExp(pattern: string): RegExp {
  let re = '^';
  for (let k = 0; k < pattern.length; k++) {
    const ch = pattern[k] as string;
    if (ch === '*') {
      if (pattern[k + 1] === '*') {
        k++;
        if (pattern[k + 1] === '/') k++;
        re += k + 1 >= pattern.length ? '.*' : '(.*/)?';
      } else re += '[^/]*';
    } else if (ch === '?') re += '[^/]';
    else if (ch === '[') {
      const end = pattern.indexOf(']', k + 1);
      if (end === -1) re += '\\[';
      else {
        re += pattern.slice(k, end + 1).replace(/^\[!/, '[^');
        k = end;
      }
    } else if (ch === '\\' && k + 1 < pattern.length) re += `\\${pattern[++k]}`;
    else re += ch.replace(/[.+^${}()|/\\]/g, '\\$&');
  }
  return new RegExp(`${re}$`);
}

export function parseDockerignore(text: string): IgnoreRule[] {
  const rules: IgnoreRule[] = [];
  for (const raw of text.split(/\r?\n/)) {
    let line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const negate = line.startsWith('!');
    if (negate) line = line.slice(1).trim();
    line = posix.normalize(line).replace(/^\/+/, '').replace(/\/+$/, '');
    if (line === '' || line === '.') continue;
    rules.push({ negate, re: patternToRegExp(line) });
  }
  return rules;
}

/** Last matching rule wins; a rule matching a parent directory matches everything under it. */
export function isIgnored(rules: IgnoreRule[], file: string): boolean {
  const parts = file.split('/');
  const prefixes = parts.map((_, k) => parts.slice(0, k + 1).join('/'));
  let ignored = false;
  for (const rule of rules) {
    if (prefixes.some((p) => rule.re.test(p))) ignored = !rule.negate;
  }
  return ignored;
}

// ---- COPY ----------------------------------------------------------------------------------------

/** A path inside a stage (absolute, or relative to its WORKDIR) → the host directory standing for it. */
export function hostPath(root: string, workdir: string, path: string): string {
  return join(root, posix.resolve(workdir, path));
}

/**
 * Docker COPY semantics for the cases a Dockerfile normally uses: files, directories (their
 * contents are copied), `*` in the last path segment; the destination is a directory when it ends
 * with `/`, when there are several sources, or when it already is one. Symlinks are kept as is.
 */
export function copyInto(
  sourceRoot: string,
  sources: string[],
  destination: string,
  destIsDir: boolean,
): void {
  const expanded: string[] = [];
  for (const s of sources) {
    const full = join(sourceRoot, s);
    if (/[*?[]/.test(basename(s))) {
      const re = patternToRegExp(basename(s));
      const dir = dirname(full);
      const names = existsSync(dir) ? readdirSync(dir).filter((n) => re.test(n)) : [];
      if (names.length === 0) throw new Error(`COPY: no source matches ${s}`);
      expanded.push(...names.map((n) => join(dir, n)));
    } else {
      if (!existsSync(full)) throw new Error(`COPY: source ${s} does not exist (looked for ${full})`);
      expanded.push(full);
    }
  }
  const intoDir =
    destIsDir || expanded.length > 1 || (existsSync(destination) && statSync(destination).isDirectory());
  for (const src of expanded) {
    if (statSync(src).isDirectory()) {
      cpSync(src, destination, { recursive: true, verbatimSymlinks: true });
    } else {
      const target = intoDir ? join(destination, basename(src)) : destination;
      mkdirSync(dirname(target), { recursive: true });
      copyFileSync(src, target);
    }
  }
}

// ---- processes -----------------------------------------------------------------------------------

const TAIL_BYTES = 64 * 1024;

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  ms: number;
  timedOut: boolean;
}

export interface Started {
  child: ChildProcess;
  output: () => string;
  exited: Promise<RunResult>;
}

/** Every child started here, so afterAll can kill what is still running. */
const running = new Set<ChildProcess>();

function tail(text: string, max: number): string {
  return text.length <= max ? text : `…${text.slice(text.length - max)}`;
}

/**
 * Starts argv in its own process group (so a timeout or afterAll can kill the whole tree: npm →
 * node-gyp → make → g++) and collects the tail of its output.
 */
export function start(
  argv: string[],
  opts: { cwd: string; env: NodeJS.ProcessEnv; timeoutMs: number; label: string },
): Started {
  const [cmd, ...args] = argv;
  if (!cmd) throw new Error('empty command');
  const began = Date.now();
  const child = spawn(cmd, args, {
    cwd: opts.cwd,
    env: opts.env,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(child);
  let stdout = '';
  let stderr = '';
  let combined = '';
  child.stdout?.setEncoding('utf8').on('data', (d: string) => {
    stdout = tail(stdout + d, TAIL_BYTES);
    combined = tail(combined + d, TAIL_BYTES);
  });
  child.stderr?.setEncoding('utf8').on('data', (d: string) => {
    stderr = tail(stderr + d, TAIL_BYTES);
    combined = tail(combined + d, TAIL_BYTES);
  });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    killGroup(child, 'SIGKILL');
  }, opts.timeoutMs);
  const exited = new Promise<RunResult>((resolve) => {
    child.on('error', (err) => {
      stderr += `\nspawn error: ${err.message}`;
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      running.delete(child);
      resolve({ code, signal, stdout, stderr, ms: Date.now() - began, timedOut });
    });
  });
  return { child, output: () => combined, exited };
}

function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    try {
      child.kill(signal);
    } catch {
      // already gone
    }
  }
}

/** Kills (SIGKILL, whole process group) every child still running; for afterAll. */
export async function killAll(): Promise<void> {
  const waits = [...running].map(
    (child) =>
      new Promise<void>((resolve) => {
        child.once('close', () => resolve());
        killGroup(child, 'SIGKILL');
        setTimeout(resolve, 5000).unref();
      }),
  );
  await Promise.all(waits);
}

export function describeFailure(
  label: string,
  argv: string[],
  cwd: string,
  r: RunResult,
  lines = 40,
): string {
  // npm and compilers say what went wrong first and then print pages of help or context: show both ends.
  const last = (s: string) => {
    const all = s.trimEnd().split('\n');
    if (all.length <= lines + 10) return all.join('\n');
    return [...all.slice(0, 10), `… (${all.length - lines - 10} lines) …`, ...all.slice(-lines)].join('\n');
  };
  const how = r.timedOut
    ? `timed out after ${Math.round(r.ms / 1000)} s (killed)`
    : `exited with ${r.signal ? `signal ${r.signal}` : `code ${r.code}`} after ${Math.round(r.ms / 1000)} s`;
  return [
    `${label} ${how}`,
    `  command: ${argv.map((a) => (/\s/.test(a) ? JSON.stringify(a) : a)).join(' ')}`,
    `  cwd: ${cwd}`,
    `--- stderr (first 10 and last ${lines} lines) ---`,
    last(r.stderr) || '(empty)',
    `--- stdout (first 10 and last ${lines} lines) ---`,
    last(r.stdout) || '(empty)',
  ].join('\n');
}

/** Runs argv to completion; throws with the output tails unless it exits 0. */
export async function run(
  argv: string[],
  opts: { cwd: string; env: NodeJS.ProcessEnv; timeoutMs: number; label: string },
): Promise<RunResult> {
  const r = await start(argv, opts).exited;
  if (r.code !== 0 || r.timedOut) throw new Error(describeFailure(opts.label, argv, opts.cwd, r));
  return r;
}

// ---- network -------------------------------------------------------------------------------------

export { freePort } from '../../rigs/harness';

export interface HttpResult {
  status: number;
  body: string;
}

export function httpRequest(
  port: number,
  method: string,
  path: string,
  opts: { headers?: Record<string, string>; body?: Buffer; timeoutMs?: number } = {},
): Promise<HttpResult> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, method, path, headers: opts.headers, timeout: opts.timeoutMs ?? 5000 },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          body += d;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () =>
      req.destroy(new Error(`${method} ${path}: no answer in ${opts.timeoutMs ?? 5000} ms`)),
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}
