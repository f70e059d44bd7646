import { copyFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { join } from 'node:path';
import type { ForwardingHarness, ReceiverRun } from './protocol';
import { percentile } from '../rigs/harness';

/**
 * The console figure (issue 12), run by run.ts: the real receiver (`serve`) on a copy of the
 * pre-filled database (1 000 000 events by default, the last week of them within the charts'
 * window), signed in with ADMIN_TOKEN over real HTTP, each page requested one after the other and
 * timed from the request to the last byte of its answer on loopback — the server's time plus a
 * fraction of a millisecond. Target: p95 ≤ 100 ms for each page.
 *
 * The first view of the overview after a start counts the deliveries of the last 8 days into the
 * hourly rollup (at most 50 000 per view); it is reported apart, as "first view".
 */

export const CONSOLE_TARGET_P95_MS = 100;

export interface ConsolePageFigure {
  name: string;
  path: string;
  requests: number;
  p50Ms: number;
  p95Ms: number;
  maxMs: number;
  /** Bytes of the page (the last answer). */
  bytes: number;
}

export interface ConsoleFigures {
  events: number;
  /** The first overview after the start (its rollup catching up). */
  firstOverviewMs: number;
  pages: ConsolePageFigure[];
}

const TOKEN = 'bench-console-admin-token-0123456789';

/** The pages timed; `nu` is a proposal of the pre-filled database (prefill.ts numbers them from 10 000 000). */
function pages(nu: number): { name: string; path: string; h1: string }[] {
  const json = encodeURIComponent(JSON.stringify({ dados: { no_conveniada: 'Empresa' } }));
  return [
    { name: 'overview', path: '/console', h1: 'Overview' },
    { name: 'proposal page', path: `/console/proposals/${nu}`, h1: `Proposal ${nu}` },
    {
      name: 'events, evento + status',
      path: '/console/events?evento=proposta.aprovada&status=done',
      h1: 'Events',
    },
    { name: 'events, JSON body match', path: `/console/events?json=${json}`, h1: 'Events' },
    { name: 'proposals, by status', path: '/console/proposals?status=efetivada', h1: 'Proposals' },
  ];
}

export async function runConsoleFigures(
  h: Pick<ForwardingHarness, 'dir' | 'startReceiver'>,
  prefilled: { path: string; events: number },
  requests: number,
  errors: string[],
): Promise<ConsoleFigures> {
  const dbPath = join(h.dir, 'console.db');
  copyFileSync(prefilled.path, dbPath);
  const receiver = await h.startReceiver('console', { ADMIN_TOKEN: TOKEN, LOG_LEVEL: 'warn' }, dbPath);
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const cookie = await signIn(receiver, agent);
    const started = performance.now();
    const first = await get(receiver, agent, '/console', cookie);
    const firstOverviewMs = performance.now() - started;
    if (first.status !== 200) errors.push(`console: the first overview answered ${first.status}`);
    // A proposal of the middle of the log (prefill: 5 events per proposal).
    const nu = 10_000_000 + Math.floor(prefilled.events / 5 / 2);
    const figures: ConsolePageFigure[] = [];
    for (const page of pages(nu)) {
      figures.push(await timePage(receiver, agent, cookie, page, requests, errors));
      if (!receiver.alive()) throw new Error(`console: the receiver died during ${page.name}`);
    }
    return { events: prefilled.events, firstOverviewMs, pages: figures };
  } finally {
    agent.destroy();
    await receiver.stop();
  }
}

async function timePage(
  receiver: ReceiverRun,
  agent: Agent,
  cookie: string,
  page: { name: string; path: string; h1: string },
  requests: number,
  errors: string[],
): Promise<ConsolePageFigure> {
  process.stderr.write(`bench: console ${page.name} ...`);
  for (let i = 0; i < 3; i++) await get(receiver, agent, page.path, cookie); // warm-up
  const samples: number[] = [];
  let last = { status: 0, body: '' };
  for (let i = 0; i < requests; i++) {
    const t0 = performance.now();
    last = await get(receiver, agent, page.path, cookie);
    samples.push(performance.now() - t0);
  }
  if (last.status !== 200 || !last.body.includes(`<h1>${page.h1}</h1>`))
    errors.push(`console ${page.name}: answered ${last.status} without <h1>${page.h1}</h1>`);
  const sorted = Float64Array.from(samples).sort();
  const figure = {
    name: page.name,
    path: page.path,
    requests,
    p50Ms: percentile(sorted, 0.5),
    p95Ms: percentile(sorted, 0.95),
    maxMs: sorted[sorted.length - 1] ?? 0,
    bytes: Buffer.byteLength(last.body),
  };
  process.stderr.write(` p95 ${figure.p95Ms.toFixed(1)} ms\n`);
  return figure;
}

async function signIn(receiver: ReceiverRun, agent: Agent): Promise<string> {
  const answer = await send(
    receiver,
    agent,
    'POST',
    '/console/login',
    '',
    `token=${encodeURIComponent(TOKEN)}`,
  );
  const cookie = answer.setCookie.map((c) => c.split(';')[0]).find((c) => c?.startsWith('consig_console='));
  if (answer.status !== 303 || cookie === undefined)
    throw new Error(`console: sign-in answered ${answer.status} without a session cookie`);
  return cookie;
}

function get(receiver: ReceiverRun, agent: Agent, path: string, cookie: string) {
  return send(receiver, agent, 'GET', path, cookie, null);
}

function send(
  receiver: ReceiverRun,
  agent: Agent,
  method: string,
  path: string,
  cookie: string,
  form: string | null,
): Promise<{ status: number; body: string; setCookie: string[] }> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = {};
    if (cookie !== '') headers.cookie = cookie;
    if (form !== null) headers['content-type'] = 'application/x-www-form-urlencoded';
    const req = request({ host: '127.0.0.1', port: receiver.port, method, path, agent, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          body: Buffer.concat(chunks).toString('utf8'),
          setCookie: res.headers['set-cookie'] ?? [],
        }),
      );
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(form ?? undefined);
  });
}

export function consoleReport(f: ConsoleFigures): string {
  const lines = [
    `console: pages of the real receiver on a database of ${f.events} events, signed in, one request at a time over loopback`,
    `  first overview after the start (hourly rollup catching up): ${f.firstOverviewMs.toFixed(1)} ms`,
  ];
  for (const p of f.pages) {
    lines.push(
      `  ${p.name.padEnd(26)} p50 ${p.p50Ms.toFixed(1).padStart(6)} ms  p95 ${p.p95Ms.toFixed(1).padStart(6)} ms  ` +
        `max ${p.maxMs.toFixed(1).padStart(6)} ms  (${p.requests} requests, ${Math.round(p.bytes / 1024)} KB)`,
    );
  }
  const worst = Math.max(...f.pages.map((p) => p.p95Ms));
  lines.push(
    `target "console pages p95 ≤ ${CONSOLE_TARGET_P95_MS} ms at ${f.events} events": ` +
      `${worst <= CONSOLE_TARGET_P95_MS ? 'MET' : 'MISSED'} (worst p95 ${worst.toFixed(1)} ms)`,
  );
  return lines.join('\n');
}
