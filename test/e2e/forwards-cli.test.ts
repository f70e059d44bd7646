import { spawn } from 'node:child_process';
import { CPF, lifecycleMessages } from '../helpers/outbox';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseDestinationsFile } from '../../src/domain/forwarding/destinations';
import { destinationWants, type OutgoingMessage } from '../../src/domain/forwarding/messages';
import type { ProposalStatus } from '../../src/domain/lifecycle';
import { forwardOutbox } from '../../src/sqlite/sqlite-outbox';
import { openStore } from '../../src/sqlite/store';
import Database from '../../src/sqlite/sqlite-driver';
import { BIN, runCli } from '../helpers/process';
import { eventually } from '../helpers/receiver';
import { tempDir } from '../helpers/tmp';

/**
 * `forwards …` and `feed` as real child processes of the built CLI, on a real SQLite file whose
 * outbox is written with the pipeline's own statements (forwardOutbox), and destinations read from
 * a real DESTINATIONS_FILE.
 */

const DESTINATIONS_JSON = JSON.stringify({
  destinations: [
    { name: 'crm', url: 'https://crm.example/hooks', secret: 'crm-secret-1', types: ['proposal.changed'] },
    { name: 'frozen', url: 'https://frozen.example/', secret: 'frozen-secret-1', paused: true },
    { name: 'late', url: 'https://late.example/', secret: 'late-secret-1', types: ['proposal.changed'] },
  ],
});
// `late` joins after the history below was stored.
const LIVE = parseDestinationsFile(DESTINATIONS_JSON, 'test').filter((d) => d.name !== 'late');

let tmp: ReturnType<typeof tempDir>;
let env: Record<string, string>;
beforeEach(() => {
  tmp = tempDir('consig-fwd-cli-');
  const file = join(tmp.dir, 'destinations.json');
  writeFileSync(file, DESTINATIONS_JSON);
  env = { DATABASE_PATH: join(tmp.dir, 'consig.db'), DESTINATIONS_FILE: file, FEED_ENABLED: 'true' };
  expect(runCli(['migrate'], env).status).toBe(0);
});
afterEach(() => tmp.cleanup());

let eventSeq = 0;

/** Commits the messages of one life-cycle event as the outbox handler does. */
function commit(nu: number, evento: string, to: ProposalStatus): OutgoingMessage[] {
  eventSeq += 1;
  const id = eventSeq;
  const at = new Date(Date.UTC(2026, 10, 21, 10, id)).toISOString();
  const messages = lifecycleMessages({ id, nu, evento, to, at }, { idPrefix: 'c' });
  const store = openStore(env.DATABASE_PATH as string);
  try {
    const outbox = forwardOutbox(store.db);
    store.db.transaction(() => {
      for (const m of messages)
        outbox.insert(
          m,
          LIVE.filter((d) => destinationWants(d, m)).map((d) => d.name),
        );
    })();
  } finally {
    store.close();
  }
  return messages;
}

function sql<T>(query: string, ...params: unknown[]): T[] {
  const db = new Database(env.DATABASE_PATH as string);
  try {
    const statement = db.prepare(query);
    if (!statement.reader) {
      statement.run(...params);
      return [];
    }
    return statement.all(...params) as T[];
  } finally {
    db.close();
  }
}

const crmDelivery = (webhookId: string) =>
  (
    sql<{ id: number }>(
      "SELECT d.id FROM forward_deliveries d JOIN forward_messages m ON m.id = d.message_id WHERE m.webhook_id = ? AND d.destination = 'crm'",
      webhookId,
    )[0] as { id: number }
  ).id;

function expectOneLineError(
  r: { status: number | null; stderr: string; stdout: string },
  code: number,
  pattern: RegExp,
) {
  expect(r.status).toBe(code);
  expect(r.stdout).toBe('');
  const lines = r.stderr.trim().split('\n');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(pattern);
}

/** proposal.changed of proposals 1 (twice) and 2; crm gets those, frozen everything. */
function history() {
  const a = commit(1, 'proposta.criada', 'em_analise');
  const b = commit(1, 'proposta.aprovada', 'aprovada');
  const c = commit(2, 'proposta.criada', 'em_analise');
  const changed = [a, b, c].map(
    (ms) => (ms.find((m) => m.type === 'proposal.changed') as OutgoingMessage).webhookId,
  );
  return { changed };
}

it('forwards list: a table, JSON, filters; bad options are one line', () => {
  const { changed } = history();
  const table = runCli(['forwards', 'list', '--destination', 'crm'], env);
  expect(table.status).toBe(0);
  expect(table.stdout.split('\n')[0]).toMatch(/^id\s+destination\s+status\s+attempts\s+type\s+nu_proposta/);
  expect(table.stdout.trim().split('\n')).toHaveLength(2 + 3);
  const json = runCli(['forwards', 'list', '--destination', 'crm', '--proposal', '1', '--json'], env);
  expect(JSON.parse(json.stdout).map((r: { webhook_id: string }) => r.webhook_id)).toEqual([
    changed[1],
    changed[0],
  ]);
  const typed = runCli(
    ['forwards', 'list', '--type', 'event.received', '--since', '2026-11-21T10:02:00Z', '--json'],
    env,
  );
  expect(
    JSON.parse(typed.stdout).map((r: { destination: string; nu_proposta: number }) => [
      r.destination,
      r.nu_proposta,
    ]),
  ).toEqual([
    ['frozen', 2],
    ['frozen', 1],
  ]);
  expectOneLineError(
    runCli(['forwards', 'list', '--status', 'lost'], env),
    2,
    /--status expects pending, retrying, delivered, dead/,
  );
  expectOneLineError(
    runCli(['forwards', 'list', '--since', 'today'], env),
    2,
    /--since expects an ISO 8601 date/,
  );
  expectOneLineError(
    runCli(['forwards', 'list', '--limit', '0'], env),
    2,
    /--limit expects an integer from 1 to 1000/,
  );
});

it('forwards show: the message as the destination gets it (CPF masked) and its attempts', () => {
  const { changed } = history();
  const id = crmDelivery(changed[0] as string);
  const r = runCli(['forwards', 'show', String(id), '--json'], env);
  expect(r.status).toBe(0);
  const shown = JSON.parse(r.stdout);
  expect(shown.delivery).toMatchObject({ id, destination: 'crm', status: 'pending', webhook_id: changed[0] });
  expect(shown.message.data.proposal.nu_cpf).toBe('***.456.789-**');
  expect(shown.attempts).toEqual([]);
  expect(r.stdout).not.toContain(CPF);
  const text = runCli(['forwards', 'show', String(id)], env);
  expect(text.stdout).toContain(`forward ${id}: proposal.changed ${changed[0]} → crm: pending, 0 attempt(s)`);
  expectOneLineError(runCli(['forwards', 'show', '999'], env), 2, /no forward 999/);
  expectOneLineError(runCli(['forwards', 'show', 'x'], env), 2, /delivery ids are positive integers/);
});

it('forwards replay: by id at once; by filter only with --yes; never everything', () => {
  const { changed } = history();
  sql("UPDATE forward_deliveries SET status = 'dead', attempts = 12, next_attempt_at = NULL");
  const one = crmDelivery(changed[0] as string);
  const byId = runCli(['forwards', 'replay', String(one)], env);
  expect(byId.status).toBe(0);
  expect(byId.stdout).toMatch(/^replayed 1 delivery \(dead 1, delivered 0, pending 0\)/);
  expect(sql('SELECT status, attempts FROM forward_deliveries WHERE id = ?', one)).toEqual([
    { status: 'pending', attempts: 0 },
  ]);

  const ask = runCli(['forwards', 'replay', '--destination', 'crm', '--status', 'dead'], env);
  expectOneLineError(
    ask,
    1,
    /^consig-receiver: 2 deliveries \(dead 2, delivered 0, pending 0\) would be replayed; run again with --yes/,
  );
  expect(
    sql("SELECT count(*) AS n FROM forward_deliveries WHERE destination = 'crm' AND status = 'dead'"),
  ).toEqual([{ n: 2 }]);
  const yes = runCli(
    ['forwards', 'replay', '--destination', 'crm', '--status', 'dead', '--yes', '--json'],
    env,
  );
  expect(JSON.parse(yes.stdout)).toEqual({ replayed: 2, by_status: { dead: 2, delivered: 0, pending: 0 } });
  expect(
    sql("SELECT count(*) AS n FROM forward_deliveries WHERE destination = 'crm' AND status = 'pending'"),
  ).toEqual([{ n: 3 }]);
  const nothing = runCli(['forwards', 'replay', '--destination', 'crm', '--status', 'dead'], env);
  expect(nothing).toMatchObject({ status: 0, stdout: 'nothing to replay\n' });

  expectOneLineError(runCli(['forwards', 'replay'], env), 2, /needs delivery ids or a filter/);
  expectOneLineError(
    runCli(['forwards', 'replay', '1', '--status', 'dead'], env),
    2,
    /ids or a filter, not both/,
  );
  expectOneLineError(runCli(['forwards', 'replay', '4242'], env), 2, /no forward 4242/);
});

it('forwards pause / resume / destinations; a destination paused in its file stays paused', () => {
  history();
  const paused = runCli(['forwards', 'pause', 'crm'], env);
  expect(paused.status).toBe(0);
  expect(paused.stdout).toContain('destination crm paused');
  expect(sql("SELECT paused FROM forward_destinations WHERE name = 'crm'")).toEqual([{ paused: 1 }]);
  const list = JSON.parse(runCli(['forwards', 'destinations', '--json'], env).stdout);
  expect(list.map((d: { name: string; paused: boolean }) => [d.name, d.paused])).toEqual([
    ['crm', true],
    ['frozen', true],
    ['late', false],
  ]);
  expect(list[0]).toMatchObject({ url: 'https://crm.example/hooks', counts: { pending: 3, dead: 0 } });
  expect(JSON.stringify(list)).not.toContain('secret-1');
  const table = runCli(['forwards', 'destinations'], env);
  expect(table.stdout).toMatch(/^name\s+configured\s+paused\s+pending/);
  expect(table.stdout).toMatch(/frozen\s+yes\s+yes \(config\)/);

  expect(runCli(['forwards', 'resume', 'crm'], env).stdout).toContain('destination crm resumed');
  expect(sql("SELECT paused FROM forward_destinations WHERE name = 'crm'")).toEqual([{ paused: 0 }]);
  expectOneLineError(
    runCli(['forwards', 'resume', 'frozen'], env),
    2,
    /frozen is paused in its configuration file/,
  );
  expectOneLineError(
    runCli(['forwards', 'pause', 'nowhere'], env),
    2,
    /no destination "nowhere" is configured \(configured: crm, frozen, late/,
  );
});

it('forwards backfill: only what the destination wants and lacks; twice creates nothing', () => {
  history();
  const first = runCli(['forwards', 'backfill', '--destination', 'late', '--proposal', '1', '--json'], env);
  expect(JSON.parse(first.stdout)).toEqual({ destination: 'late', matched: 2, created: 2 });
  const all = runCli(['forwards', 'backfill', '--destination', 'late'], env);
  expect(all.stdout).toMatch(/^late: 3 stored message\(s\) wanted, 1 new delivery queued/);
  const again = runCli(['forwards', 'backfill', '--destination', 'late', '--json'], env);
  expect(JSON.parse(again.stdout)).toEqual({ destination: 'late', matched: 3, created: 0 });
  expect(sql("SELECT count(*) AS n FROM forward_deliveries WHERE destination = 'late'")).toEqual([{ n: 3 }]);
  expectOneLineError(
    runCli(['forwards', 'backfill', '--destination', 'nowhere'], env),
    2,
    /no destination "nowhere"/,
  );
  expect(runCli(['forwards', 'backfill'], env).status).toBe(2);
});

it('feed: JSON lines in commit order, the cursor on stderr, --after resumes exactly', () => {
  const { changed } = history();
  const first = runCli(['feed', '--limit', '2'], env);
  expect(first.status).toBe(0);
  const lines = first.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  expect(lines.map((m: { id: string }) => m.id)).toEqual(changed.slice(0, 2));
  expect(lines[0].data.proposal.nu_cpf).toBe('***.456.789-**');
  expect(first.stdout).not.toContain(CPF);
  const cursor = /^cursor (\S+)$/.exec(first.stderr.trim())?.[1] as string;
  expect(cursor).toBeDefined();
  const rest = runCli(['feed', '--after', cursor], env);
  expect(
    rest.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).id),
  ).toEqual(changed.slice(2));
  const received = runCli(['feed', '--types', 'event.received'], env);
  expect(received.stdout.trim().split('\n')).toHaveLength(3);
  expectOneLineError(runCli(['feed', '--after', 'nope'], env), 2, /--after expects a cursor/);
  expectOneLineError(runCli(['feed', '--types', 'x'], env), 2, /--types expects/);
});

it.each(['SIGTERM', 'SIGINT'] as const)(
  'feed --follow prints new commits as they come and exits 0 on %s',
  async (signal) => {
    const { changed } = history();
    const child = spawn(process.execPath, [BIN, 'feed', '--follow'], {
      env: { PATH: process.env.PATH ?? '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      const ids = () =>
        stdout
          .split('\n')
          .filter((l) => l !== '')
          .map((l) => JSON.parse(l).id as string);
      await eventually(() => ids().length === 3, 'the history is printed', 15_000);
      const later = commit(3, 'proposta.criada', 'em_analise').find((m) => m.type === 'proposal.changed');
      await eventually(() => ids().length === 4, 'the new message is printed', 15_000);
      expect(ids()).toEqual([...changed, later?.webhookId]);
      child.kill(signal);
      expect(await exited).toBe(0);
      const cursors = stderr.trim().split('\n');
      expect(cursors.every((l) => /^cursor \S+$/.test(l))).toBe(true);
      // The last cursor resumes after the last message printed.
      const last = (cursors[cursors.length - 1] as string).slice('cursor '.length);
      expect(runCli(['feed', '--after', last], env).stdout).toBe('');
    } finally {
      child.kill('SIGKILL');
    }
  },
);
