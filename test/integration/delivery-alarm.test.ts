import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type BetterSqlite3 from 'better-sqlite3';
import type { DestinationStream } from 'pino';
import type { Clock } from '../../src/clock';
import { loadConfig } from '../../src/config';
import { DeliveryWatch, startDeliveryWatch } from '../../src/http/delivery-watch';
import { openDeliveryAlarm } from '../../src/sqlite/sqlite-delivery-alarm';
import { createHttpServer } from '../../src/http/server';
import { createWebhookHandler } from '../../src/http/webhook-handler';
import { createLogger } from '../../src/logger';
import { createMetrics, type Metrics } from '../../src/metrics';
import { deliveryAlarmRepo } from '../../src/sqlite/sqlite-delivery-alarm';
import { IngestWriter } from '../../src/sqlite/ingest-writer';
import Database from '../../src/sqlite/sqlite-driver';
import { openStore, type Store } from '../../src/sqlite/store';
import { sqliteStorePort } from '../../src/sqlite/sqlite-port';
import { LogSink } from '../helpers/app';
import { delivery, postRaw, SECRET, signed } from '../helpers/payloads';
import { tempDir } from '../helpers/tmp';

/**
 * The deactivation alarm over real HTTP on a real SQLite file: every kind of non-200 answer counts
 * towards the three failures that deactivate the callback (interface §6.1, rule 4), the run is
 * stored, and the silence that follows a deactivation is noticed. The receiver is built the way
 * `serve` builds it: the production server, with the watch startDeliveryWatch gives it.
 */

const HOUR = 3_600_000;

/** A clock the test moves by hand: the silence is judged on it, never on the wall clock. */
function manualClock(start = Date.parse('2026-11-21T13:00:00Z')) {
  let now = start;
  const clock: Clock = { now: () => new Date(now), monotonic: () => performance.now() };
  return { clock, advance: (ms: number) => (now += ms) };
}

interface Receiver {
  url: string;
  store: Store;
  watch: DeliveryWatch;
  metrics: Metrics;
  logs: LogSink;
  close(): Promise<void>;
}

let tmp: ReturnType<typeof tempDir>;
let dbPath: string;
const open: Receiver[] = [];

beforeEach(() => {
  tmp = tempDir();
  dbPath = join(tmp.dir, 'consig.db');
});
afterEach(async () => {
  for (const r of open.splice(0)) await r.close();
  tmp.cleanup();
});

async function startReceiver(
  env: Record<string, string> = {},
  clock = manualClock().clock,
): Promise<Receiver> {
  const config = loadConfig(
    { WEBHOOK_SECRETS: SECRET, DATABASE_PATH: dbPath, SQLITE_BUSY_TIMEOUT_MS: '50', ...env },
    { requireSecrets: true },
  );
  const store = openStore(dbPath, { migrate: true, busyTimeoutMs: config.sqlite.busyTimeoutMs });
  const metrics = createMetrics({ defaultMetrics: false });
  const logs = new LogSink();
  const logger = createLogger('debug', logs as unknown as DestinationStream);
  const writer = new IngestWriter(store.db, store.events, store.deliveries);
  // A timer far beyond the test: every check below is called by the test itself.
  const watch = startDeliveryWatch(config, {
    ...{ metrics, logger, clock, checkIntervalMs: 10 * HOUR },
    alarm: openDeliveryAlarm(config.databasePath),
  });
  const webhook = createWebhookHandler({
    ...config,
    secrets: config.webhookSecrets,
    allowList: config.allowedCidrs,
    writer,
    metrics,
    logger,
    clock,
    watch,
  });
  const server: Server = createHttpServer({
    ...{ config, store, writer, metrics, logger, clock, webhook },
    storePort: sqliteStorePort(store),
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const r: Receiver = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    store,
    watch,
    metrics,
    logs,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      writer.close();
      watch.stop();
      store.close();
    },
  };
  open.push(r);
  return r;
}

function send(r: Receiver, body: unknown) {
  const { raw, signature } = signed(body);
  return postRaw(`${r.url}/webhooks`, raw, {
    'content-type': 'application/json',
    'x-service-signature': signature,
  });
}

async function gauge(r: Receiver, name: string): Promise<number> {
  const text = await r.metrics.registry.getSingleMetricAsString(name);
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  if (!m?.[1]) throw new Error(`no sample for ${name} in:\n${text}`);
  return Number(m[1]);
}

function errors(r: Receiver): string[] {
  return r.logs.lines.filter((l) => l.level === 'error').map((l) => String(l.msg));
}

it('three 413s in a row raise the alarm naming MAX_BODY_BYTES; the run is stored; a 200 ends it', async () => {
  const r = await startReceiver({ MAX_BODY_BYTES: '300' });
  const big = () => ({ ...delivery(), padding: 'x'.repeat(1000) });
  for (let i = 1; i <= 2; i++) {
    expect((await send(r, big())).status).toBe(413);
    expect(await gauge(r, 'consig_webhook_consecutive_failed_answers')).toBe(i);
  }
  expect(await gauge(r, 'consig_webhook_deactivation_alarm')).toBe(0);
  expect(errors(r)).toEqual([]);

  expect((await send(r, big())).status).toBe(413);
  expect(await gauge(r, 'consig_webhook_consecutive_failed_answers')).toBe(3);
  expect(await gauge(r, 'consig_webhook_deactivation_alarm')).toBe(1);
  // The legacy gauge counts only 401s of the run: none here.
  expect(await gauge(r, 'consig_webhook_consecutive_invalid_signatures')).toBe(0);
  expect(errors(r)).toEqual([
    expect.stringMatching(
      /^3 consecutive webhook deliveries failed \(payload_too_large ×3\): the service deactivates the callback.*MAX_BODY_BYTES \(300\)/,
    ),
  ]);
  expect(deliveryAlarmRepo(r.store.db).load()).toMatchObject({
    consecutive: 3,
    byAnswer: { payload_too_large: 3 },
  });

  expect((await send(r, delivery())).status).toBe(200);
  expect(await gauge(r, 'consig_webhook_consecutive_failed_answers')).toBe(0);
  expect(await gauge(r, 'consig_webhook_deactivation_alarm')).toBe(0);
  expect(deliveryAlarmRepo(r.store.db).load().consecutive).toBe(0);
});

it('three 503s while another connection holds the write lock raise the alarm naming the disk and the lock; the run is stored once the lock goes', async () => {
  const r = await startReceiver();
  const lock: BetterSqlite3.Database = new Database(dbPath);
  lock.exec('BEGIN IMMEDIATE');
  try {
    for (let i = 0; i < 3; i++) {
      const res = await send(r, delivery());
      expect(res.status).toBe(503);
      expect(res.body).toMatchObject({ error: 'storage_unavailable' });
    }
    // The alarm speaks although its own row cannot be written either.
    expect(await gauge(r, 'consig_webhook_consecutive_failed_answers')).toBe(3);
    expect(await gauge(r, 'consig_webhook_deactivation_alarm')).toBe(1);
    expect(errors(r).filter((m) => m.includes('consecutive webhook deliveries'))).toEqual([
      expect.stringMatching(/failed \(storage_unavailable ×3\).*disk.*write lock/),
    ]);
    expect(deliveryAlarmRepo(r.store.db).load().consecutive).toBe(0);
  } finally {
    lock.exec('ROLLBACK');
    lock.close();
  }
  r.watch.check();
  expect(deliveryAlarmRepo(r.store.db).load()).toMatchObject({
    consecutive: 3,
    byAnswer: { storage_unavailable: 3 },
    lastAnswer: 'storage_unavailable',
  });
});

it('401, 403 and 413 add up to one run; the legacy gauge still counts the 401s of it', async () => {
  const r = await startReceiver({ MAX_BODY_BYTES: '300' });
  const { raw } = signed(delivery());
  expect(
    (await postRaw(`${r.url}/webhooks`, raw, { 'x-service-signature': `sha256=${'0'.repeat(64)}` })).status,
  ).toBe(401);
  expect((await send(r, { ...delivery(), padding: 'x'.repeat(1000) })).status).toBe(413);
  expect((await postRaw(`${r.url}/webhooks`, raw, {})).status).toBe(401);
  expect(await gauge(r, 'consig_webhook_consecutive_failed_answers')).toBe(3);
  expect(await gauge(r, 'consig_webhook_consecutive_invalid_signatures')).toBe(2);
  expect(errors(r)).toEqual([
    expect.stringMatching(/WEBHOOK_SECRETS.*MAX_BODY_BYTES|MAX_BODY_BYTES.*WEBHOOK_SECRETS/),
  ]);
});

it('a run is picked up where it was by the next receiver on the same file', async () => {
  const first = await startReceiver({ ALLOWED_CIDRS: '10.0.0.0/8' });
  for (let i = 0; i < 2; i++) expect((await send(first, delivery())).status).toBe(403);
  await first.close();
  open.splice(open.indexOf(first), 1);

  const second = await startReceiver({ ALLOWED_CIDRS: '10.0.0.0/8' });
  expect(await gauge(second, 'consig_webhook_consecutive_failed_answers')).toBe(2);
  expect((await send(second, delivery())).status).toBe(403);
  expect(errors(second)).toEqual([expect.stringMatching(/^3 consecutive .*ALLOWED_CIDRS/)]);
});

describe('silence: no delivery for DELIVERY_SILENCE_ALARM_MS while proposals are in flight', () => {
  function addProposal(store: Store, nu: number, status: string): void {
    store.db
      .prepare(
        `INSERT INTO proposals (nu_proposta, stage, status, created_at, updated_at)
         VALUES (?, 'proposta', ?, '2026-11-21T13:00:00Z', '2026-11-21T13:00:00Z')`,
      )
      .run(nu, status);
  }

  it('raises the alarm and logs an error once the time has passed, repeats, and ends when a delivery comes', async () => {
    const time = manualClock();
    const r = await startReceiver({}, time.clock);
    expect((await send(r, delivery())).status).toBe(200);
    addProposal(r.store, 1, 'averbacao_solicitada');

    time.advance(HOUR - 1);
    r.watch.check();
    expect(await gauge(r, 'consig_webhook_seconds_since_last_delivery')).toBe((HOUR - 1) / 1000);
    expect(await gauge(r, 'consig_webhook_silence_alarm')).toBe(0);

    time.advance(1);
    r.watch.check();
    expect(await gauge(r, 'consig_webhook_silence_alarm')).toBe(1);
    expect(errors(r)).toEqual([
      expect.stringMatching(/^no webhook delivery for 60 min while 1 proposals are in flight/),
    ]);
    r.watch.check();
    expect(errors(r)).toHaveLength(1);
    time.advance(HOUR);
    r.watch.check();
    expect(errors(r)).toHaveLength(2);

    expect((await send(r, delivery())).status).toBe(200);
    expect(await gauge(r, 'consig_webhook_silence_alarm')).toBe(0);
    expect(await gauge(r, 'consig_webhook_seconds_since_last_delivery')).toBe(0);
  });

  it('stays quiet when every proposal is final: the service has nothing to say', async () => {
    const time = manualClock();
    const r = await startReceiver({}, time.clock);
    expect((await send(r, delivery())).status).toBe(200);
    for (const [nu, status] of [
      [1, 'paga'],
      [2, 'negada'],
      [3, 'cancelada'],
      [4, 'averbacao_negada'],
    ] as const)
      addProposal(r.store, nu, status);
    time.advance(3 * HOUR);
    r.watch.check();
    expect(await gauge(r, 'consig_webhook_silence_alarm')).toBe(0);
    // The same silence with one proposal not final is an alarm: the quiet above is not an accident.
    addProposal(r.store, 5, 'pagamento_falhou');
    r.watch.check();
    expect(await gauge(r, 'consig_webhook_silence_alarm')).toBe(1);
  });

  it('is measured from the last delivery stored before a restart, and is off with 0', async () => {
    const time = manualClock();
    const first = await startReceiver({}, time.clock);
    expect((await send(first, delivery())).status).toBe(200);
    addProposal(first.store, 1, 'em_analise');
    await first.close();
    open.splice(open.indexOf(first), 1);

    time.advance(2 * HOUR);
    const second = await startReceiver({}, time.clock);
    // start() checked once already.
    expect(await gauge(second, 'consig_webhook_seconds_since_last_delivery')).toBe((2 * HOUR) / 1000);
    expect(await gauge(second, 'consig_webhook_silence_alarm')).toBe(1);
    await second.close();
    open.splice(open.indexOf(second), 1);

    const off = await startReceiver({ DELIVERY_SILENCE_ALARM_MS: '0' }, time.clock);
    expect(await gauge(off, 'consig_webhook_silence_alarm')).toBe(0);
  });
});

it("the alarm's reads are index seeks, not table scans", () => {
  const store = openStore(dbPath, { migrate: true });
  const recorded: string[] = [];
  const original = Database.prototype.prepare;
  Database.prototype.prepare = function (this: BetterSqlite3.Database, source: string) {
    recorded.push(source);
    return original.call(this, source);
  } as typeof Database.prototype.prepare;
  try {
    deliveryAlarmRepo(store.db);
  } finally {
    Database.prototype.prepare = original;
  }
  const plans = recorded
    .filter((sql) => /^\s*SELECT/i.test(sql))
    .map((sql) =>
      (store.db.prepare(`EXPLAIN QUERY PLAN ${sql.replace(/\?/g, "'x'")}`).all() as { detail: string }[])
        .map((p) => p.detail)
        .join('; '),
    );
  store.close();
  expect(plans).toEqual([
    expect.stringMatching(/delivery_alarm/),
    expect.stringMatching(/SEARCH deliveries USING COVERING INDEX deliveries_received_at/),
    expect.stringMatching(/SEARCH proposals USING COVERING INDEX proposals_status \(status=\?\)/),
  ]);
});

it('a database that fails under the watch never breaks an answer: the run goes on in memory', () => {
  const store = openStore(dbPath, { migrate: true });
  const metrics = createMetrics({ defaultMetrics: false });
  const logs = new LogSink();
  const logger = createLogger('debug', logs as unknown as DestinationStream);
  const watch = new DeliveryWatch({
    metrics,
    logger,
    clock: manualClock().clock,
    signatureHeader: 'X-Service-Signature',
    maxBodyBytes: 100,
    repo: deliveryAlarmRepo(store.db),
    silenceMs: HOUR,
  });
  store.close();
  expect(() => {
    for (let i = 0; i < 3; i++) watch.answered('storage_unavailable');
    watch.check();
  }).not.toThrow();
  expect(logs.lines.filter((l) => l.level === 'error')).toHaveLength(1);
  expect(logs.lines.some((l) => l.msg === 'delivery alarm check failed')).toBe(true);
});
