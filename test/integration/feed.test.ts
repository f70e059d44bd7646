import { createServer, type Server } from 'node:http';
import { CPF, lifecycleMessages } from '../helpers/outbox';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { systemClock } from '../../src/clock';
import { loadConfig } from '../../src/config';
import { messagesFor, type OutgoingMessage } from '../../src/domain/forwarding/messages';
import type { ProposalStatus } from '../../src/domain/lifecycle';
import { FEED_RECHECK_MS } from '../../src/http/admin/feed-routes';
import { FeedWaiters } from '../../src/http/admin/feed-waiters';
import { createApp } from '../../src/http/app';
import { createLogger } from '../../src/logger';
import { createMetrics } from '../../src/metrics';
import { encodeFeedCursor } from '../../src/core/feed-reader';
import { forwardOutbox } from '../../src/sqlite/sqlite-outbox';
import { IngestWriter } from '../../src/sqlite/ingest-writer';
import { openStore, type Store } from '../../src/sqlite/store';
import { sqliteStorePort } from '../../src/sqlite/sqlite-port';
import { SECRET } from '../helpers/payloads';
import { delivery, eventually, startTestReceiver, type TestReceiver } from '../helpers/receiver';
import { tempDir } from '../helpers/tmp';

/**
 * `GET /admin/feed` over real HTTP: order, cursors, long-polls woken by a commit or timing out,
 * the CPF masked; first through the whole receiver (webhooks → pipeline → outbox → feed), then on
 * an app whose outbox is written with the pipeline's own statements (forwardOutbox).
 */

const TOKEN = 'admin-token-feed';

interface Answer {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON answers are read loosely in tests
  body: any;
  text: string;
  ms: number;
}

async function get(base: string, path: string, signal?: AbortSignal): Promise<Answer> {
  const started = performance.now();
  const res = await fetch(`${base}/admin${path}`, {
    headers: { authorization: `Bearer ${TOKEN}` },
    ...(signal === undefined ? {} : { signal }),
  });
  const text = await res.text();
  return { status: res.status, body: JSON.parse(text), text, ms: performance.now() - started };
}

describe('through the whole receiver', () => {
  let r: TestReceiver | undefined;
  afterEach(async () => {
    await r?.stop();
    r = undefined;
  });

  it('FEED_ENABLED unset and no destination: the feed answers 404 feed_disabled and nothing is stored for it', async () => {
    r = await startTestReceiver({ env: { ADMIN_TOKEN: TOKEN } });
    expect((await r.send(delivery('proposta.criada', { nu_proposta: 4243 }))).status).toBe(200);
    const rec = r;
    const done = rec.store.db.prepare("SELECT count(*) AS n FROM events WHERE status = 'done'");
    await eventually(() => (done.get() as { n: number }).n === 1, 'event processed');
    const feed = await get(r.url, '/feed');
    expect(feed.status).toBe(404);
    expect(feed.body).toMatchObject({
      error: 'feed_disabled',
      message: expect.stringContaining('FEED_ENABLED=true'),
    });
    const stored = rec.store.db.prepare('SELECT count(*) AS n FROM forward_messages').get() as { n: number };
    expect(stored.n).toBe(0);
  });

  it('serves the proposal changes the pipeline committed, in order, CPF masked', async () => {
    r = await startTestReceiver({ env: { ADMIN_TOKEN: TOKEN, FEED_ENABLED: 'true' } });
    for (const evento of ['proposta.criada', 'proposta.pre_aprovada', 'proposta.aprovada']) {
      expect((await r.send(delivery(evento, { nu_proposta: 4242 }))).status).toBe(200);
    }
    const rec = r;
    await eventually(
      () =>
        (
          rec.store.db.prepare("SELECT count(*) AS n FROM events WHERE status = 'done'").get() as {
            n: number;
          }
        ).n === 3,
      'events processed',
    );
    const feed = await get(r.url, '/feed');
    expect(feed.status).toBe(200);
    expect(
      feed.body.messages.map((m: { type: string; data: { to: string } }) => [m.type, m.data.to]),
    ).toEqual([
      ['proposal.changed', 'em_analise'],
      ['proposal.changed', 'pre_aprovada'],
      ['proposal.changed', 'aprovada'],
    ]);
    expect(feed.body.messages[0].data.proposal.nu_cpf).toBe('***.456.789-**');
    expect(feed.text).not.toContain(CPF);
    // event.received is stored only for a destination that wants it: none here.
    const received = await get(r.url, '/feed?types=event.received');
    expect(received.body.messages).toHaveLength(0);
    const after = await get(r.url, `/feed?after=${feed.body.cursor}`);
    expect(after.body.messages).toEqual([]);
  });
});

describe('on an app with the forwarding deps', () => {
  let tmp: ReturnType<typeof tempDir>;
  let store: Store;
  let writer: IngestWriter;
  let servers: Server[];
  let waiters: FeedWaiters;
  let url: string;

  beforeEach(async () => {
    tmp = tempDir('consig-feed-');
    const dbPath = join(tmp.dir, 'consig.db');
    store = openStore(dbPath, { migrate: true, busyTimeoutMs: 20 });
    writer = new IngestWriter(store.db, store.events, store.deliveries, { maxBatch: 64 });
    servers = [];
    waiters = new FeedWaiters();
    url = await listen(false, waiters);
  });

  afterEach(async () => {
    waiters.close();
    for (const server of servers) {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
    writer.close();
    store.close();
    tmp.cleanup();
  });

  async function listen(feedFullCpf: boolean, feedWaiters: FeedWaiters): Promise<string> {
    const config = loadConfig({ DATABASE_PATH: store.path, ADMIN_TOKEN: TOKEN, WEBHOOK_SECRETS: SECRET });
    const app = createApp({
      config,
      store,
      storePort: sqliteStorePort(store),
      writer,
      metrics: createMetrics({ defaultMetrics: false }),
      logger: createLogger('silent'),
      clock: systemClock,
      forwarding: {
        destinations: [],
        feedFullCpf,
        feedEnabled: true,
        waiters: feedWaiters,
        nudge: () => undefined,
      },
    });
    const server = createServer(app);
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  let eventSeq = 0;

  /** What the pipeline stores for one life-cycle event: event.received, then proposal.changed. */
  function changed(nu: number, to: ProposalStatus, evento = 'proposta.aprovada'): OutgoingMessage[] {
    eventSeq += 1;
    const id = eventSeq;
    const at = new Date(Date.UTC(2026, 10, 21, 10, 0, id)).toISOString();
    return lifecycleMessages({ id, nu, evento, to, at }, { idPrefix: 'f' });
  }

  /** A registry result that finished an averbação: averbacao.result alone (and event.received). */
  function averbacaoResult(nu: number): OutgoingMessage[] {
    eventSeq += 1;
    const id = eventSeq;
    const at = new Date(Date.UTC(2026, 10, 21, 10, 0, id)).toISOString();
    return messagesFor(
      {
        event: {
          id,
          kind: 'registry',
          evento: null,
          nu_proposta: null,
          request_id: `req-${id}`,
          dedup_key: `wh_a${id}`,
          received_at: at,
          payload: { requestId: `req-${id}`, status: 'completed' },
        },
        transition: null,
        proposal: null,
        proposalAverbacao: null,
        finishedAverbacao: {
          request_id: `req-${id}`,
          correlation_id: null,
          nu_proposta: nu,
          status: 'completed',
          result_source: 'webhook',
          stale: 0,
          result_body: '{"status":"completed"}',
          completed_at: at,
          updated_at: at,
        },
      },
      at,
    );
  }

  /** Commits the messages as the pipeline does (no destination: the feed serves them anyway). */
  function commit(messages: OutgoingMessage[]): string[] {
    const outbox = forwardOutbox(store.db);
    store.db.transaction(() => messages.forEach((m) => outbox.insert(m, [])))();
    return messages.filter((m) => m.type !== 'event.received').map((m) => m.webhookId);
  }

  const ids = (a: Answer) => a.body.messages.map((m: { id: string }) => m.id);

  it('serves proposal.changed and averbacao.result in commit order; a cursor resumes exactly after it', async () => {
    const expected = [
      ...commit(changed(1, 'em_analise', 'proposta.criada')),
      ...commit(changed(2, 'em_analise', 'proposta.criada')),
      ...commit(averbacaoResult(1)),
      ...commit(changed(1, 'aprovada')),
    ];
    expect(expected).toHaveLength(4);
    const first = await get(url, '/feed?limit=3');
    expect(ids(first)).toEqual(expected.slice(0, 3));
    expect(first.body.messages[2]).toMatchObject({ type: 'averbacao.result', data: { nu_proposta: 1 } });
    expect(Object.keys(first.body.messages[0])).toEqual(['id', 'type', 'created_at', 'data']);
    const second = await get(url, `/feed?after=${first.body.cursor}&limit=3`);
    expect(ids(second)).toEqual(expected.slice(3));
    const third = await get(url, `/feed?after=${second.body.cursor}`);
    expect(third.body).toEqual({ messages: [], cursor: second.body.cursor });
    const later = commit(changed(3, 'em_analise', 'proposta.criada'));
    expect(ids(await get(url, `/feed?after=${third.body.cursor}`))).toEqual(later);

    // One message at a time: the same sequence, nothing skipped, nothing twice.
    const walked: string[] = [];
    let cursor: string | undefined;
    for (;;) {
      const page = await get(url, `/feed?limit=1${cursor === undefined ? '' : `&after=${cursor}`}`);
      if (page.body.messages.length === 0) break;
      walked.push(...ids(page));
      cursor = page.body.cursor;
    }
    expect(walked).toEqual([...expected, ...later]);
  });

  it('types chooses the message types; the cursor moves past the others', async () => {
    commit(changed(1, 'em_analise', 'proposta.criada'));
    const all = await get(url, '/feed?types=event.received,proposal.changed,averbacao.result');
    expect(all.body.messages.map((m: { type: string }) => m.type)).toEqual([
      'event.received',
      'proposal.changed',
    ]);
    const received = await get(url, '/feed?types=event.received');
    expect(received.body.messages.map((m: { type: string }) => m.type)).toEqual(['event.received']);
    const onlyResults = await get(url, '/feed?types=averbacao.result');
    expect(onlyResults.body).toEqual({ messages: [], cursor: all.body.cursor });
  });

  it.each([
    ['after=not-a-cursor', 'invalid_cursor', 'after must be a cursor'],
    [`after=${Buffer.from('f1:abc').toString('base64url')}`, 'invalid_cursor', 'after must be a cursor'],
    [`after=${Buffer.from('f1:01').toString('base64url')}`, 'invalid_cursor', 'after must be a cursor'],
    ['limit=0', 'bad_request', 'limit must be an integer from 1 to 1000'],
    ['limit=1001', 'bad_request', 'limit must be an integer from 1 to 1000'],
    ['limit=ten', 'bad_request', 'limit must be a non-negative integer'],
    ['wait=31', 'bad_request', 'wait must be an integer from 0 to 30'],
    ['wait=-1', 'bad_request', 'wait must be a non-negative integer'],
    ['types=proposal.changed,bogus', 'bad_request', 'types must be a comma-separated list'],
    ['after=a&after=b', 'bad_request', 'after may be given only once'],
  ])('a bad query (%s) is 400 %s', async (query, error, message) => {
    const res = await get(url, `/feed?${query}`);
    expect(res.status).toBe(400);
    expect(res.body.error).toBe(error);
    expect(res.body.message).toContain(message);
  });

  it('masks the CPF everywhere unless FEED_FULL_CPF', async () => {
    commit(changed(1, 'em_analise', 'proposta.criada'));
    const masked = await get(url, '/feed?types=event.received,proposal.changed');
    expect(masked.text).not.toContain(CPF);
    expect(masked.body.messages[1].data.proposal.nu_cpf).toBe('***.456.789-**');
    expect(masked.body.messages[0].data.payload.dados.nu_cpf).toBe('***.456.789-**');
    const fullUrl = await listen(true, new FeedWaiters());
    const full = await get(fullUrl, '/feed');
    expect(full.body.messages[0].data.proposal.nu_cpf).toBe(CPF);
  });

  it('a long-poll answers as soon as a message is committed and notified', async () => {
    commit(changed(1, 'em_analise', 'proposta.criada'));
    const { cursor } = (await get(url, '/feed')).body;
    const pending = get(url, `/feed?after=${cursor}&wait=10`);
    await eventually(() => waiters.size === 1, 'the request waits');
    const before = waiters.counts.timeouts;
    const expected = commit(changed(1, 'aprovada'));
    waiters.notify();
    const res = await pending;
    // The notify woke it, not the 500 ms re-check: no wait ended by its timer meanwhile.
    expect(waiters.counts.timeouts).toBe(before);
    expect(ids(res)).toEqual(expected);
    expect(res.body.cursor).not.toBe(cursor);
    expect(waiters.size).toBe(0);
  });

  it('a long-poll finds a message committed by another process (no notify) by re-checking', async () => {
    const pending = get(url, '/feed?wait=10');
    await eventually(() => waiters.size === 1, 'the request waits');
    const before = waiters.counts.timeouts;
    const expected = commit(changed(1, 'em_analise', 'proposta.criada'));
    const res = await pending;
    expect(ids(res)).toEqual(expected);
    // Found by a re-check: a wait ended by its timer (nothing notified), and before the last one
    // (10 s of re-checks are 10 000 / FEED_RECHECK_MS waits; the answer at the end reads the page too).
    expect(waiters.counts.timeouts).toBeGreaterThan(before);
    expect(waiters.counts.timeouts - before).toBeLessThan(10_000 / FEED_RECHECK_MS);
  });

  it('a long-poll with nothing new times out with an empty list and the same cursor', async () => {
    commit(changed(1, 'em_analise', 'proposta.criada'));
    const { cursor } = (await get(url, '/feed')).body;
    const before = waiters.counts;
    const res = await get(url, `/feed?after=${cursor}&wait=1`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ messages: [], cursor });
    // It waited its second out in re-checks (500 ms each), every one ended by its timer.
    const after = waiters.counts;
    expect(after.timeouts - before.timeouts).toBeGreaterThanOrEqual(2);
    expect(after.waits - before.waits).toBe(after.timeouts - before.timeouts);
    // And no more than its second's worth: 1000 / FEED_RECHECK_MS waits, one more when a timer
    // fires a little before the clock has moved its full 500 ms.
    expect(after.timeouts - before.timeouts).toBeLessThanOrEqual(1000 / FEED_RECHECK_MS + 1);
    // From an empty outbox, the cursor is the beginning.
    const empty = await get(url, `/feed?after=${encodeFeedCursor(0)}&types=averbacao.result&wait=0`);
    expect(empty.body.messages).toEqual([]);
  });

  it('close() (shutdown) answers every waiting long-poll at once', async () => {
    const pending = get(url, '/feed?wait=30');
    await eventually(() => waiters.size === 1, 'the request waits');
    const before = waiters.counts;
    waiters.close();
    const res = await pending;
    // close() answered it, not a re-check: no wait ended by its timer, none began again.
    expect(waiters.counts).toEqual(before);
    expect(res.body).toEqual({ messages: [], cursor: encodeFeedCursor(0) });
    // Later requests do not wait either: answered without a single wait.
    expect((await get(url, '/feed?wait=30')).body.messages).toEqual([]);
    expect(waiters.counts).toEqual(before);
  });

  it('a client that goes away is no longer waited for', async () => {
    const controller = new AbortController();
    const pending = get(url, '/feed?wait=30', controller.signal).catch((err: { name: string }) => err);
    await eventually(() => waiters.size === 1, 'the request waits');
    const before = waiters.counts;
    controller.abort();
    expect(await pending).toMatchObject({ name: 'AbortError' });
    await eventually(() => waiters.size === 0, 'the waiter is let go');
    // Let go by the abort, not by its re-check's timer.
    expect(waiters.counts).toEqual(before);
    // It stays gone: while a second request waits out its second in re-checks (every wait of it
    // ended by its timer), the first one waits no more — a request still looping would add waits
    // that its timer did not end, or timer ends of its own.
    const witness = await get(url, '/feed?wait=1');
    expect(witness.body.messages).toEqual([]);
    const after = waiters.counts;
    expect(after.timeouts - before.timeouts).toBeGreaterThanOrEqual(2);
    expect(after.waits - before.waits).toBe(after.timeouts - before.timeouts);
    expect(waiters.size).toBe(0);
  });
});

describe('FeedWaiters', () => {
  it('wait resolves on notify, on its timeout, on abort, and at once after close; counts say which', async () => {
    const waiters = new FeedWaiters();
    const notified = waiters.wait(5000);
    expect(waiters.size).toBe(1);
    waiters.notify();
    await notified;
    expect(waiters.counts).toEqual({ waits: 1, timeouts: 0 });
    await waiters.wait(50);
    expect(waiters.counts).toEqual({ waits: 2, timeouts: 1 });
    const controller = new AbortController();
    const aborted = waiters.wait(5000, controller.signal);
    controller.abort();
    await aborted;
    expect(waiters.size).toBe(0);
    expect(waiters.counts).toEqual({ waits: 3, timeouts: 1 });
    const waiting = waiters.wait(5000);
    waiters.close();
    await waiting;
    expect(waiters.counts).toEqual({ waits: 4, timeouts: 1 });
    // After close(), a wait resolves at once: nothing is left waiting and no timer ends it.
    const late = waiters.wait(5000);
    expect(waiters.size).toBe(0);
    await late;
    expect(waiters.counts).toEqual({ waits: 5, timeouts: 1 });
    expect(waiters.closed).toBe(true);
  });
});
