import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ConsoleClient } from './console-client';
import { FakeDestination } from './destination';
import { delivery, postRaw, signed } from './payloads';
import { runCliAsync } from './process';
import type { TestReceiver } from './receiver';

/**
 * Contract §5: admin answers, commands and logs never show a CPF in full — even with a destination
 * that asked for it (`full_cpf: true`), which still gets it (issue 21, item 5). The sweep drives a
 * receiver with events that name a known CPF (valid JSON, a quarantined text body, bytes that are
 * not UTF-8, a registry result naming it), a full-CPF destination that echoes what it gets and
 * refuses the first message; then every admin route and every read command (as a table and as
 * JSON), the console's pages, and the receiver's log, are searched for the 11 digits and for the
 * formatted CPF. SQLite mode runs it in the fast tier (test/integration/cpf-answers.test.ts), cluster
 * mode in the postgres tier (cpf-admin-answers.test.ts). Needs dist/ (npm run build) for the commands.
 */

export const TOKEN = 'cpf-admin-token-0123456789';
const CPF = '52998224725';
const FORMATTED = '529.982.247-25';
const NU = 7001;
const REQUEST_ID = 'req-cpf-7001';

let destination: FakeDestination;

/** Jest hooks: a destination per test that echoes the body it got (the attempt's answer is stored) and refuses the first message (dead). */
export function echoingDestination(): void {
  beforeEach(async () => {
    destination = await FakeDestination.start((req) => ({
      status: req.seq === 0 ? 400 : 200,
      body: req.raw.toString('utf8'),
    }));
  });
  afterEach(() => destination.close());
}

function leaks(text: string): boolean {
  return text.includes(CPF) || text.includes(FORMATTED);
}

/** The receiver's environment: the echoing destination with `full_cpf`, the feed on (CPF masked). */
export function environment(dir: string): Record<string, string> {
  const file = join(dir, 'destinations.json');
  writeFileSync(
    file,
    JSON.stringify({
      destinations: [{ name: 'warehouse', url: destination.url, secret: 'dw-secret-0123', full_cpf: true }],
    }),
  );
  return { DESTINATIONS_FILE: file, FEED_ENABLED: 'true', FEED_FULL_CPF: 'false' };
}

async function drive(r: TestReceiver): Promise<void> {
  const dados = { nu_cpf: CPF };
  for (const evento of ['proposta.criada', 'proposta.aprovada'])
    expect((await r.send(delivery(evento, { nu_proposta: NU, dados }))).status).toBe(200);
  const solicitada = delivery('averbacao.solicitada', {
    nu_proposta: NU,
    dados: { ...dados, requestId: REQUEST_ID },
  });
  expect((await r.send(solicitada)).status).toBe(200);
  const result = { requestId: REQUEST_ID, status: 'completed', servidor: { cpf: FORMATTED } };
  expect((await r.send(result, '/webhooks/registry')).status).toBe(200);
  // Quarantined: a text that is not JSON, and bytes that are not UTF-8, each naming the CPF.
  for (const raw of [
    Buffer.from(`cpf=${CPF}; not json`),
    Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(` ${CPF}`)]),
  ]) {
    const { signature } = signed(raw);
    const res = await postRaw(`${r.url}/webhooks`, raw, { 'x-service-signature': signature });
    expect(res.body.status).toBe('quarantined');
  }
}

async function admin(
  r: TestReceiver,
  path: string,
  method = 'GET',
): Promise<{ status: number; text: string }> {
  const res = await fetch(`${r.url}/admin${path}`, { method, headers: { authorization: `Bearer ${TOKEN}` } });
  return { status: res.status, text: await res.text() };
}

/** Waits until each message was answered and the forwarding tables say so. */
async function settled(r: TestReceiver): Promise<void> {
  const until = Date.now() + 30_000;
  for (;;) {
    const list = JSON.parse((await admin(r, '/forwards?limit=1000')).text) as {
      forwards?: { status: string }[];
    };
    const rows = list.forwards ?? [];
    const answered = destination.requests.filter((q) => q.answer !== null).length;
    if (rows.length >= 3 && rows.every((f) => f.status !== 'pending') && answered >= rows.length) return;
    if (Date.now() > until) throw new Error(`forwarding did not settle: ${JSON.stringify(rows)}`);
    await new Promise((res) => setTimeout(res, 50));
  }
}

/** Every admin route that reads, and a forward replay's answer: path → answer text. */
async function everyAdminAnswer(r: TestReceiver): Promise<Map<string, string>> {
  const answers = new Map<string, string>();
  const get = async (path: string) => {
    const res = await admin(r, path);
    expect({ path, status: res.status }).toEqual({ path, status: 200 });
    answers.set(path, res.text);
    return JSON.parse(res.text) as Record<string, unknown>;
  };
  const events = (await get('/events?limit=1000')).events as { id: number }[];
  expect(events.length).toBeGreaterThanOrEqual(6);
  for (const e of events) {
    const { event } = (await get(`/events/${e.id}`)) as { event: { body: unknown } };
    // A body that is not UTF-8 travels as base64: its bytes are searched too.
    const { base64 } = (event.body ?? {}) as { base64?: string };
    if (base64 !== undefined)
      answers.set(`/events/${e.id} bytes`, Buffer.from(base64, 'base64').toString('latin1'));
  }
  await get(`/proposals/${NU}`);
  await get('/averbacoes');
  await get(`/averbacoes/${REQUEST_ID}`);
  // Declaring it again answers the row as it stands, the registry's answer (naming the CPF) in it.
  const tracked = await fetch(`${r.url}/admin/averbacoes/track`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ requestId: REQUEST_ID }),
  });
  const trackedText = await tracked.text();
  expect({ status: tracked.status, text: trackedText }).toMatchObject({ status: 200 });
  expect(JSON.parse(trackedText)).toMatchObject({
    status: 'already_tracked',
    averbacao: { request_id: REQUEST_ID },
  });
  answers.set('POST /averbacoes/track', trackedText);
  await get('/deliveries');
  await get('/feed?limit=1000');
  await get('/destinations');
  const forwards = (await get('/forwards?limit=1000')).forwards as { id: number; status: string }[];
  for (const f of forwards) await get(`/forwards/${f.id}`);
  const dead = forwards.find((f) => f.status === 'dead');
  expect(dead).toBeDefined();
  const replay = await admin(r, `/forwards/${dead?.id}/replay`, 'POST');
  expect(replay.status).toBe(202);
  answers.set('POST replay', replay.text);
  return answers;
}

const READ_COMMANDS: string[][] = [
  ['events'],
  ['deliveries'],
  ['stats'],
  ['proposal', String(NU)],
  ['proposals'],
  ['averbacoes'],
  ['forwards', 'list'],
  ['forwards', 'destinations'],
  ['feed'],
];

/** Every read command, as a table and as JSON (feed prints JSON only): args → stdout and stderr. */
async function everyCommandOutput(
  env: Record<string, string>,
  forwardIds: number[],
): Promise<Map<string, string>> {
  const outputs = new Map<string, string>();
  // `track` of a registration already tracked prints the row as it stands, the registry's answer in it.
  const commands = [
    ...READ_COMMANDS,
    ['track', REQUEST_ID],
    ...forwardIds.map((id) => ['forwards', 'show', String(id)]),
  ];
  for (const args of commands) {
    for (const variant of args[0] === 'feed' ? [args] : [args, [...args, '--json']]) {
      const out = await runCliAsync(variant, env);
      const failed = out.status === 0 ? '' : out.stderr;
      expect({ variant, status: out.status, failed }).toEqual({ variant, status: 0, failed: '' });
      outputs.set(variant.join(' '), out.stdout + out.stderr);
    }
  }
  return outputs;
}

/** The console's pages that show events, proposals, averbações and forwards, signed in as admin. */
async function everyConsolePage(r: TestReceiver, eventIds: number[]): Promise<Map<string, string>> {
  const c = new ConsoleClient(r.url);
  await c.signIn(TOKEN);
  const pages = new Map<string, string>();
  const paths = [
    '/console',
    '/console/events',
    ...eventIds.map((id) => `/console/events/${id}`),
    `/console/proposals/${NU}`,
    '/console/proposals',
    '/console/averbacoes',
    '/console/deliveries',
    '/console/dead',
    '/console/forwards',
    '/console/audit',
  ];
  for (const path of paths) {
    const page = await c.get(path);
    expect({ path, status: page.status }).toEqual({ path, status: 200 });
    pages.set(path, page.raw);
  }
  return pages;
}

/** Drives `r` and searches everything it shows for the CPF; `commandEnv` runs the commands on its store. */
export async function sweep(r: TestReceiver, commandEnv: Record<string, string>): Promise<void> {
  await drive(r);
  await settled(r);
  // The destination asked for the CPF in full and got it.
  expect(destination.requests.some((q) => q.raw.toString('utf8').includes(CPF))).toBe(true);
  const answers = await everyAdminAnswer(r);
  const forwardIds = [...answers.keys()].flatMap((p) => /^\/forwards\/(\d+)$/.exec(p)?.[1] ?? []).map(Number);
  const outputs = await everyCommandOutput(commandEnv, forwardIds);
  const eventIds = [...answers.keys()].flatMap((p) => /^\/events\/(\d+)$/.exec(p)?.[1] ?? []).map(Number);
  const pages = await everyConsolePage(r, eventIds);
  expect([...answers.keys()].filter((k) => k.endsWith(' bytes'))).toHaveLength(1);
  const leaking = [...answers, ...outputs, ...pages].filter(([, text]) => leaks(text)).map(([what]) => what);
  expect(leaking).toEqual([]);
  expect(outputs.size).toBeGreaterThan(READ_COMMANDS.length);
  expect(leaks(r.logs.raw)).toBe(false);
}
