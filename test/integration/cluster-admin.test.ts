import type { AuditRow } from '../../src/domain/console';
import { count, listenOutbox, rows, sendSigned, waitFor } from '../helpers/cluster-db';
import { FakeDestination } from '../helpers/destination';
import { delivery } from '../helpers/payloads';
import { clusterBed } from '../helpers/cluster-bed';
import { play, scenario, settled } from '../helpers/cluster-scenario';
import type { TestReceiver } from '../helpers/receiver';

/**
 * The admin API in cluster mode (contract §10): every route reads, and the forwarding routes write,
 * PostgreSQL's log, answering what SQLite mode answers for the same deliveries — the same paths,
 * parameters, validation, statuses and JSON. Real receivers (cluster replicas and one on SQLite
 * alone), a real PostgreSQL this file starts, a real HTTP destination.
 */

const TOKEN = 'cluster-admin-token';

const bed = clusterBed({ prefix: 'admin', env: { ADMIN_TOKEN: TOKEN }, ownServer: true }); // one test SIGKILLs it
const { replica, sqliteReceiver, destinationsFile } = bed;

interface Answer {
  status: number;
  retryAfter: string | null;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON answers are read loosely in tests
  body: any;
}

async function admin(
  r: { url: string },
  path: string,
  init: { method?: string; json?: unknown; token?: string | null } = {},
): Promise<Answer> {
  const token = init.token === undefined ? TOKEN : init.token;
  const res = await fetch(`${r.url}/admin${path}`, {
    method: init.method ?? 'GET',
    headers: {
      'content-type': 'application/json',
      ...(token === null ? {} : { authorization: `Bearer ${token}` }),
    },
    ...(init.json === undefined ? {} : { body: JSON.stringify(init.json) }),
  });
  return { status: res.status, retryAfter: res.headers.get('retry-after'), body: await res.json() };
}

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/;
const EVENT_REFERENCES = new Set(['event_id', 'first_event_id', 'last_event_id', 'result_event_id']);
const OWN_IDS = new Set(['id', 'message_id', 'next_before']);

/**
 * An answer with what legitimately differs between two logs taken out: times, durations, the
 * stores' own ids (an event's id becomes its dedup key, through `keyOf`), forwarded messages'
 * random ids and the feed's cursor. What stays is compared as it is.
 */
function normaliser(keyOf: ReadonlyMap<number, string>) {
  const clean = (v: unknown, key = ''): unknown => {
    if (v === null) return null;
    if (EVENT_REFERENCES.has(key)) return `event:${keyOf.get(Number(v)) ?? `unknown ${String(v)}`}`;
    if (OWN_IDS.has(key)) return '<id>';
    if (key === 'duration_ms') return '<ms>';
    if (key === 'cursor') return '<cursor>';
    if (typeof v === 'string' && ISO.test(v)) return '<time>';
    if (typeof v === 'string' && v.startsWith('msg_')) return '<msg>';
    if (Array.isArray(v)) return v.map((x) => clean(x));
    if (typeof v !== 'object') return v;
    const row = v as Record<string, unknown>;
    // An event stored `ignored` or `invalid` is final on arrival: SQLite leaves its processed_at
    // null, PostgreSQL's relay sets it (src/runtime/cluster/relay.ts). A difference of the tables, not of
    // the routes.
    const finalOnArrival = row.status === 'ignored' || row.status === 'invalid';
    return Object.fromEntries(
      Object.entries(row).map(([k, x]) => [
        k,
        finalOnArrival && k === 'processed_at' ? '<final on arrival>' : clean(x, k),
      ]),
    );
  };
  return clean;
}

/** What each mode's paths need: its own ids of the same rows. */
interface Ids {
  events: number[];
  deliveries: number[];
  forwards: number[];
  byEvento(evento: string | null, status?: string): number;
}

async function idsOf(r: TestReceiver): Promise<{ ids: Ids; keyOf: Map<number, string> }> {
  const events = (await admin(r, '/events?limit=1000')).body.events as {
    id: number;
    dedup_key: string;
    evento: string | null;
    status: string;
  }[];
  const deliveries = (await admin(r, '/deliveries?limit=1000')).body.deliveries as { id: number }[];
  const forwards = (await admin(r, '/forwards?limit=1000')).body.forwards as { id: number }[];
  const ids: Ids = {
    events: events.map((e) => e.id),
    deliveries: deliveries.map((d) => d.id),
    forwards: forwards.map((f) => f.id),
    byEvento: (evento, status) => {
      const found = events.find((e) => e.evento === evento && (status === undefined || e.status === status));
      if (found === undefined) throw new Error(`no event ${String(evento)} ${status ?? ''}`);
      return found.id;
    },
  };
  return { ids, keyOf: new Map(events.map((e) => [e.id, e.dedup_key])) };
}

/** A `console_audit` row as both stores hold it. */
type Audited = Pick<AuditRow, 'role' | 'session' | 'person' | 'action' | 'target' | 'detail' | 'ip'>;

/** The rows with each mode's own ids in their targets named as both modes name them. */
function auditOf(audited: Audited[], mode: { ids: Ids; keyOf: Map<number, string> }): Audited[] {
  const forwardName = (id: number) =>
    id === mode.ids.forwards[0] ? 'first' : id === mode.ids.forwards.at(-1) ? 'last' : String(id);
  return audited.map((a) => ({
    ...a,
    target:
      a.target
        ?.replace(/^event:(\d+)$/, (_m, id: string) => `event:${mode.keyOf.get(Number(id)) ?? id}`)
        .replace(/^forward:(\d+)$/, (_m, id: string) => `forward:${forwardName(Number(id))}`) ?? null,
  }));
}

/** Every GET route, its filters and paging, as each mode names the same rows. */
const READS: ((ids: Ids) => string)[] = [
  () => '/events',
  () => '/events?nu_proposta=9101',
  () => '/events?nu_proposta=ADE-77',
  () => '/events?status=ignored',
  () => '/events?kind=registry',
  () => '/events?evento=proposta.criada&status=done',
  (ids) => `/events?limit=3&before=${ids.events[4]}`,
  (ids) => `/events/${ids.byEvento('proposta.pre_aprovada')}`,
  (ids) => `/events/${ids.byEvento(null, 'invalid')}`,
  (ids) => `/events/${ids.byEvento(null, 'done')}`,
  () => '/deliveries',
  () => '/deliveries?outcome=invalid_signature',
  () => '/deliveries?outcome=duplicate',
  (ids) => `/deliveries?limit=2&before=${ids.deliveries[3]}`,
  () => '/proposals/9101',
  () => '/proposals/ADE-77',
  () => '/proposals/9103',
  () => '/averbacoes',
  () => '/averbacoes?status=completed&stale=false&nu_proposta=9101',
  () => '/averbacoes?status=queued',
  () => '/averbacoes/req-9101',
  () => '/forwards',
  () => '/forwards?destination=crm&type=proposal.changed&status=pending&limit=3',
  () => '/forwards?nu_proposta=9101&since=2020-01-01',
  (ids) => `/forwards?limit=2&before=${ids.forwards[2]}`,
  (ids) => `/forwards/${ids.forwards[0]}`,
  (ids) => `/forwards/${ids.forwards[ids.forwards.length - 1]}`,
  () => '/destinations',
  () => '/feed?limit=4',
  () => '/feed?types=event.received,proposal.changed,averbacao.result&limit=1000',
];

/** Requests each mode must refuse alike (status ≥ 400, same body). */
const REFUSALS: { path: string; method?: string; json?: unknown }[] = [
  { path: '/events?limit=abc' },
  { path: '/events?before=-1' },
  { path: '/events?status=done&status=dead' },
  { path: '/deliveries?limit=1.5' },
  { path: '/averbacoes?limit=x' },
  { path: '/forwards?limit=0' },
  { path: '/forwards?type=proposal.created' },
  { path: '/forwards?status=sent' },
  { path: '/forwards?since=2026-02-30' },
  { path: '/forwards/abc' },
  { path: '/feed?after=not-a-cursor' },
  { path: '/feed?limit=0' },
  { path: '/forwards/replay', method: 'POST', json: {} },
  { path: '/forwards/replay', method: 'POST', json: { status: 'dead', destinaton: 'crm' } },
  { path: '/forwards/replay', method: 'POST', json: { status: 'dead', dry_run: 'yes' } },
  { path: '/forwards/backfill', method: 'POST', json: {} },
  { path: '/forwards/backfill', method: 'POST', json: { destination: 'nope' } },
  { path: '/destinations/crm/resume', method: 'POST' },
  { path: '/destinations/nope/pause', method: 'POST' },
  { path: '/events/999999' },
  { path: '/events/abc' },
  { path: '/events/999999/replay', method: 'POST' },
  { path: '/proposals/424242' },
  { path: '/averbacoes/req-unknown' },
  { path: '/forwards/999999' },
  { path: '/forwards/999999/replay', method: 'POST' },
  { path: '/nope' },
  { path: '/subjects/find', method: 'POST', json: {} },
  { path: '/subjects/find', method: 'POST', json: { cpf: '12345678900' } },
  { path: '/subjects/export', method: 'POST', json: { cpf: 'abc' } },
  { path: '/subjects/erase', method: 'POST', json: { cpf: '11144477735' } },
];

describe('one admin API, two stores', () => {
  it('every GET route answers in cluster mode what it answers in SQLite mode for the same deliveries, and refuses alike', async () => {
    const env = { DESTINATIONS_FILE: destinationsFile(), FEED_ENABLED: 'true' };
    const steps = scenario();
    const lite = await sqliteReceiver(env);
    await play(lite, bed.pool, steps);
    const node = await replica(env);
    await play(node, bed.pool, steps);

    const modes = { lite: await idsOf(lite), node: await idsOf(node) };
    // The scenario's rows are there to compare (10 events, 12 deliveries, messages for crm).
    expect(modes.node.ids.events).toHaveLength(10);
    expect(modes.node.ids.deliveries).toHaveLength(12);
    expect(modes.node.ids.forwards.length).toBeGreaterThan(10);
    for (const read of READS) {
      const path = { lite: read(modes.lite.ids), node: read(modes.node.ids) };
      const lites = await admin(lite, path.lite);
      const nodes = await admin(node, path.node);
      expect(lites.status).toBe(200);
      const clean = { lite: normaliser(modes.lite.keyOf), node: normaliser(modes.node.keyOf) };
      expect({ path: path.node, status: nodes.status, body: clean.node(nodes.body) }).toEqual({
        path: path.node,
        status: 200,
        body: clean.lite(lites.body),
      });
    }

    // The reads that serve personal data were audited alike (one row each, the same targets and
    // details), in the SQLite file and in PostgreSQL.
    const audits = {
      lite: auditOf(
        lite.store.db
          .prepare('SELECT role, session, person, action, target, detail, ip FROM console_audit ORDER BY id')
          .all() as Audited[],
        modes.lite,
      ),
      node: auditOf(
        await rows<Audited>(
          bed.pool,
          'SELECT role, session, person, action, target, detail, ip FROM console_audit ORDER BY id',
        ),
        modes.node,
      ),
    };
    expect(audits.node).toEqual(audits.lite);
    expect(audits.node.map((a) => [a.action, a.target])).toEqual([
      ...[0, 1, 2].map(() => ['admin_read', expect.stringMatching(/^event:/)]),
      ['admin_read', 'proposal:9101'],
      ['admin_read', 'proposal:ADE-77'],
      ['admin_read', 'proposal:9103'],
      ...[0, 1, 2].map(() => ['admin_read', 'averbacoes']),
      ['admin_read', 'averbacao:req-9101'],
      ['admin_read', 'forward:first'],
      ['admin_read', 'forward:last'],
      ['feed_read', 'feed'],
      ['feed_read', 'feed'],
    ]);

    // Not vacuous: the answers hold the rows (spot checks on cluster mode's).
    const detail = await admin(node, `/events/${modes.node.ids.byEvento(null, 'invalid')}`);
    expect(detail.body.event.body).toEqual({ base64: Buffer.from([0x7b, 0xff, 0x7d]).toString('base64') });
    const proposal = await admin(node, '/proposals/9101');
    expect(proposal.body.proposal).toMatchObject({ nu_proposta: 9101, status: 'averbacao_solicitada' });
    expect(proposal.body.proposal.nu_cpf).toMatch(/\*/);
    expect((await admin(node, '/proposals/ADE-77')).body.proposal.nu_proposta).toBe('ADE-77');
    expect((await admin(node, '/averbacoes/req-9101')).body.averbacao).toMatchObject({
      status: 'completed',
      result_source: 'webhook',
    });
    expect((await admin(node, '/deliveries?outcome=invalid_signature')).body.deliveries).toHaveLength(1);

    for (const refusal of REFUSALS) {
      const lites = await admin(lite, refusal.path, refusal);
      const nodes = await admin(node, refusal.path, refusal);
      expect(lites.status).toBeGreaterThanOrEqual(400);
      expect({ request: refusal, status: nodes.status, body: nodes.body }).toEqual({
        request: refusal,
        status: lites.status,
        body: lites.body,
      });
    }

    // One person found alike (issue 45): the same counts in the log; cluster mode adds this
    // replica's spool, and PostgreSQL has no file whose bytes are searched.
    const found = {
      lite: await admin(lite, '/subjects/find', { method: 'POST', json: { cpf: '111.444.777-35' } }),
      node: await admin(node, '/subjects/find', { method: 'POST', json: { cpf: '111.444.777-35' } }),
    };
    const logCounts = (b: { log: Record<string, unknown> }) => ({
      ...b.log,
      place: '<place>',
      raw_copies: '<raw>',
    });
    expect(found.node.status).toBe(200);
    expect(logCounts(found.node.body)).toEqual(logCounts(found.lite.body));
    expect(found.node.body.log.raw_copies).toBeNull();
    expect(found.lite.body.log.raw_copies).toBe(0);
    expect(found.node.body.spool).toMatchObject({ proposals: 0, events: 0 });
    expect(found.lite.body.spool).toBeNull();

    // An event with no handler to run is not replayed, in either store.
    const refused = {
      lite: await admin(lite, `/events/${modes.lite.ids.byEvento('proposta.renegociada')}/replay`, {
        method: 'POST',
      }),
      node: await admin(node, `/events/${modes.node.ids.byEvento('proposta.renegociada')}/replay`, {
        method: 'POST',
      }),
    };
    expect(refused.node.status).toBe(409);
    expect(refused.node.body).toEqual({
      ...refused.lite.body,
      message: refused.lite.body.message.replace(
        /\d+/,
        String(modes.node.ids.byEvento('proposta.renegociada')),
      ),
    });
  });
});

describe('writes on PostgreSQL', () => {
  it('an event replayed is pending again, queued in the same transaction, and processed once more', async () => {
    const node = await replica();
    const criada = delivery('proposta.criada', { nu_proposta: 9201 });
    await sendSigned(node.url, criada);
    await sendSigned(node.url, delivery('proposta.pre_aprovada', { nu_proposta: 9201 }));
    await settled(node, bed.pool, 2, 2);
    const [first] = (await admin(node, '/events?evento=proposta.criada')).body.events;
    expect(first).toMatchObject({ status: 'done', attempts: 1 });

    const replayed = await admin(node, `/events/${first.id}/replay`, { method: 'POST' });
    expect(replayed).toMatchObject({ status: 202, body: { status: 'queued', event_ids: [first.id] } });
    // Nothing but the turn queued with it runs the event again (no sweep in cluster mode).
    const again = await waitFor(async () => {
      const { event } = (await admin(node, `/events/${first.id}`)).body;
      return event.status === 'done' && event.processed_at > first.processed_at && event;
    }, 'the replayed event processed again');
    expect(again).toMatchObject({ attempts: 1, last_error: null });
    expect(JSON.parse(again.body).metadata.webhook_id).toBe(
      (criada.metadata as { webhook_id: string }).webhook_id,
    );
    const timeline = (await admin(node, '/proposals/9201')).body.timeline as { event_id: number }[];
    expect(timeline.filter((t) => t.event_id === first.id).length).toBeGreaterThan(0);
    expect((await admin(node, '/proposals/9201')).body.proposal.status).toBe('pre_aprovada');
  });

  it('forwarding: pause, resume, replay one, replay by filter and backfill write PostgreSQL, notify the sending replica, and the destination gets the messages', async () => {
    const dest = await FakeDestination.start();
    const listener = await listenOutbox(bed.url);
    try {
      const erp = { name: 'erp', url: dest.url, secret: 'erp-secret', types: ['proposal.changed'] };
      const node = await replica({ DESTINATIONS_FILE: destinationsFile([erp]) });

      // Paused by an operator before any message exists: PostgreSQL's flag, no notification.
      await listener.settled();
      const paused = await admin(node, '/destinations/erp/pause', { method: 'POST' });
      expect(paused).toMatchObject({
        status: 200,
        body: { status: 'paused', destination: { name: 'erp', paused: true, paused_by_operator: true } },
      });
      expect(await rows(bed.pool, "SELECT paused FROM forward_destinations WHERE name = 'erp'")).toEqual([
        { paused: true },
      ]);
      await listener.settled();
      expect(listener.received()).toBe(0);
      // The sender reads the flags every 250 ms (src/forwarding/sender.ts): let it see this one.
      await new Promise((r) => setTimeout(r, 600));

      for (const evento of ['proposta.criada', 'proposta.pre_aprovada'])
        await sendSigned(node.url, delivery(evento, { nu_proposta: 9301 }));
      await settled(node, bed.pool, 2, 2);
      await listener.settled();
      const turns = listener.received();
      expect((await admin(node, '/forwards?destination=erp&status=pending')).body.forwards).toHaveLength(2);
      expect(dest.requests).toHaveLength(0);

      // Paused in its configuration: only the file resumes it.
      expect((await admin(node, '/destinations/crm/resume', { method: 'POST' })).body.error).toBe(
        'paused_in_config',
      );
      const resumed = await admin(node, '/destinations/erp/resume', { method: 'POST' });
      expect(resumed).toMatchObject({
        status: 200,
        body: { status: 'resumed', destination: { paused: false } },
      });
      await listener.settled();
      expect(listener.received()).toBe(turns + 1);
      await waitFor(() => dest.accepted().length === 2, 'both messages delivered once erp resumed');
      await waitFor(
        async () =>
          (await count(
            bed.pool,
            "SELECT count(*) AS n FROM forward_deliveries WHERE destination = 'erp' AND status = 'delivered'",
          )) === 2,
        'both recorded delivered',
      );

      // One delivery replayed: pending again, notified, sent again with the same webhook-id.
      const [latest] = (await admin(node, '/forwards?destination=erp')).body.forwards;
      const one = await admin(node, `/forwards/${latest.id}/replay`, { method: 'POST' });
      expect(one).toMatchObject({
        status: 202,
        body: { status: 'queued', replayed: 1, by_status: { delivered: 1 }, delivery: { id: latest.id } },
      });
      await listener.settled();
      expect(listener.received()).toBe(turns + 2);
      await waitFor(() => dest.accepted().length === 3, 'the replayed delivery sent again');
      expect(dest.accepted()[2]!.webhookId).toBe(latest.webhook_id);

      // By filter: a dry run counts and changes nothing; the real one requeues both.
      await waitFor(
        async () =>
          (await admin(node, '/forwards?destination=erp&status=delivered')).body.forwards.length === 2,
        'the replayed delivery recorded delivered again',
      );
      const dry = await admin(node, '/forwards/replay', {
        method: 'POST',
        json: { destination: 'erp', status: 'delivered', dry_run: true },
      });
      expect(dry).toMatchObject({ status: 200, body: { dry_run: true, matched: 2 } });
      await listener.settled();
      expect(listener.received()).toBe(turns + 2);
      const bulk = await admin(node, '/forwards/replay', {
        method: 'POST',
        json: { destination: 'erp', status: 'delivered', nu_proposta: 9301 },
      });
      expect(bulk).toMatchObject({ status: 202, body: { status: 'queued', replayed: 2 } });
      await listener.settled();
      expect(listener.received()).toBe(turns + 3);
      await waitFor(() => dest.accepted().length === 5, 'both sent again');

      // Backfill: a destination configured after the messages were stored gets a delivery for each
      // one it wants (audit: paused in its file, so they wait); twice creates nothing.
      await bed.stop(node);
      const audit = {
        name: 'audit',
        url: dest.url,
        secret: 'audit-secret',
        types: ['proposal.changed'],
        paused: true,
      };
      const restarted = await replica({ DESTINATIONS_FILE: destinationsFile([erp, audit]) });
      await listener.settled();
      const before = listener.received();
      const backfill = await admin(restarted, '/forwards/backfill', {
        method: 'POST',
        json: { destination: 'audit' },
      });
      expect(backfill).toMatchObject({
        status: 202,
        body: { status: 'queued', destination: 'audit', created: 2 },
      });
      expect(backfill.body.matched).toBe(backfill.body.created);
      await listener.settled();
      expect(listener.received()).toBe(before + 1);
      const twice = await admin(restarted, '/forwards/backfill', {
        method: 'POST',
        json: { destination: 'audit' },
      });
      expect(twice.body).toMatchObject({ matched: 2, created: 0 });
      await listener.settled();
      expect(listener.received()).toBe(before + 1);
      expect((await admin(restarted, '/forwards?destination=audit')).body.forwards).toHaveLength(2);
      const summaries = (await admin(restarted, '/destinations')).body.destinations as { name: string }[];
      expect(summaries.map((d) => d.name)).toEqual(['crm', 'erp', 'audit']);
    } finally {
      await listener.close();
      await dest.close();
    }
  });
});

describe('the token, averbações, and PostgreSQL away', () => {
  it('the token is required; averbações are declared in PostgreSQL; the console is served; PostgreSQL away is a 503 log_unavailable while webhooks still get 200', async () => {
    const node = await replica({ DESTINATIONS_FILE: destinationsFile(), FEED_ENABLED: 'true' });
    await sendSigned(node.url, delivery('proposta.criada', { nu_proposta: 9401 }));
    await settled(node, bed.pool, 1, 1);

    expect(await admin(node, '/events', { token: null })).toMatchObject({
      status: 401,
      body: { error: 'unauthorized' },
    });
    expect((await admin(node, '/forwards', { token: 'wrong' })).status).toBe(401);
    expect((await admin(node, '/feed', { token: 'wrong' })).status).toBe(401);
    expect(
      (await admin(node, '/averbacoes/track', { method: 'POST', json: { requestId: 'r' }, token: null }))
        .status,
    ).toBe(401);

    // Declaring a registration writes PostgreSQL, its first poll a pg-boss job queued with the row.
    const track = await admin(node, '/averbacoes/track', {
      method: 'POST',
      json: { requestId: 'req-1', nu_proposta: 9401 },
    });
    expect(track).toMatchObject({
      status: 201,
      body: {
        status: 'tracked',
        averbacao: { request_id: 'req-1', nu_proposta: 9401, status: 'queued', tracked_via: 'declared' },
      },
    });
    expect(
      await count(bed.pool, "SELECT count(*) AS n FROM pgboss.job WHERE singleton_key = 'r:req-1'"),
    ).toBe(1);
    const again = await admin(node, '/averbacoes/track', { method: 'POST', json: { requestId: 'req-1' } });
    expect(again).toMatchObject({ status: 200, body: { status: 'already_tracked' } });
    expect(
      await count(bed.pool, "SELECT count(*) AS n FROM pgboss.job WHERE singleton_key = 'r:req-1'"),
    ).toBe(1);
    // Starting one needs the service, as in SQLite mode.
    const start = await admin(node, '/averbacoes', { method: 'POST', json: {} });
    expect(start).toMatchObject({ status: 503, body: { error: 'service_not_configured' } });
    // The console is served in cluster mode too (test/integration/cluster-console.test.ts).
    const page = await fetch(`${node.url}/console`, { redirect: 'manual' });
    expect([page.status, page.headers.get('location')]).toEqual([303, '/console/login?next=%2Fconsole']);

    // PostgreSQL gone (SIGKILL): each route says so and when to ask again; webhooks are still answered.
    bed.pg.kill9();
    const away: [string, { method?: string; json?: unknown }][] = [
      ['/events', {}],
      ['/events/1', {}],
      ['/events/1/replay', { method: 'POST' }],
      ['/deliveries', {}],
      ['/proposals/9401', {}],
      ['/averbacoes', {}],
      ['/averbacoes/req-1', {}],
      ['/averbacoes/track', { method: 'POST', json: { requestId: 'req-2' } }],
      ['/forwards', {}],
      ['/forwards/1/replay', { method: 'POST' }],
      ['/forwards/replay', { method: 'POST', json: { status: 'dead' } }],
      ['/destinations', {}],
      ['/destinations/crm/pause', { method: 'POST' }],
      ['/feed', {}],
    ];
    for (const [path, init] of away) {
      const answer = await admin(node, path, init);
      expect({
        path,
        status: answer.status,
        error: answer.body.error,
        retryAfter: answer.retryAfter,
      }).toEqual({
        path,
        status: 503,
        error: 'log_unavailable',
        retryAfter: '1',
      });
    }
    const acked = await sendSigned(node.url, delivery('proposta.criada', { nu_proposta: 9402 }));
    expect(acked.status).toBe(200);

    // Back: the routes answer again, and show what was acknowledged meanwhile.
    await bed.pg.restart({ mode: 'fast' });
    await waitFor(async () => {
      const answer = await admin(node, '/events?nu_proposta=9402');
      return answer.status === 200 && answer.body.events.length === 1;
    }, 'the delivery acknowledged while PostgreSQL was away, listed once it is back');
  });
});
