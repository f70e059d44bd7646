import { createHash } from 'node:crypto';
import {
  count,
  dropFailureTrigger,
  failEvent,
  installFailureTrigger,
  rows,
  sendSigned,
  waitFor,
} from '../helpers/cluster-db';
import { play, scenario, settled } from '../helpers/cluster-scenario';
import { ConsoleClient, csrfOf, squash } from '../helpers/console-client';
import { delivery } from '../helpers/payloads';
import type { TestReceiver } from '../helpers/receiver';
import { clusterBed } from '../helpers/cluster-bed';

/**
 * The operator console in cluster mode (contract §9, §10): its pages read PostgreSQL's log and show
 * what SQLite mode shows of the same deliveries; its sessions and audit table live in PostgreSQL, so
 * a browser signed in through one replica is signed in at every other; its actions write
 * PostgreSQL; PostgreSQL away is a 503 page; the overview shows the relay of the replica serving
 * it. Real receivers (cluster replicas and one on SQLite alone) on loopback, a real PostgreSQL this
 * file starts.
 */

const ADMIN = 'cluster-console-admin-token';
const VIEWER = 'cluster-console-viewer-token';

/** A destination an operator may pause (nothing listens there: it only ever gets averbação results). */
const ERP = { name: 'erp', url: 'http://127.0.0.1:9/erp', secret: 'erp-secret', types: ['averbacao.result'] };

const bed = clusterBed({
  prefix: 'console',
  env: { ADMIN_TOKEN: ADMIN, VIEWER_TOKEN: VIEWER },
  ownServer: true, // one test SIGKILLs it
});
const { sqliteReceiver, destinationsFile } = bed;
const replica = (id: string, env: Record<string, string> = {}) => bed.replica({ REPLICA_ID: id, ...env });

async function signedIn(r: TestReceiver, token = ADMIN): Promise<ConsoleClient> {
  const c = new ConsoleClient(r.url);
  await c.signIn(token);
  return c;
}

/** The admin API's events (id → dedup key): how each mode numbers the same deliveries. */
async function eventKeys(r: TestReceiver): Promise<Map<number, string>> {
  const res = await fetch(`${r.url}/admin/events?limit=1000`, {
    headers: { authorization: `Bearer ${ADMIN}` },
  });
  const { events } = (await res.json()) as { events: { id: number; dedup_key: string }[] };
  return new Map(events.map((e) => [e.id, e.dedup_key]));
}

/**
 * A page with what legitimately differs between two logs of the same deliveries taken out: times
 * and ages, durations, the CSRF token and the session's tag, the stores' own ids (an event's id
 * becomes its dedup key, through `keyOf`; the others a mark). What stays is compared as it is.
 */
function normalise(page: string, keyOf: ReadonlyMap<number, string>): string {
  const key = (id: string) => keyOf.get(Number(id)) ?? `unknown ${id}`;
  return squash(page)
    .replace(/name="_csrf" value="[^"]*"/g, 'name="_csrf" value="<csrf>"')
    .replace(/<time datetime="[^"]*">[^<]*<\/time>/g, '<time>')
    .replace(/\d+ (s|min|h|d)( \d+ (min|h))? ago/g, '<age>')
    .replace(
      /href="\/console\/events\/(\d+)">(\d+)<\/a>/g,
      (_m, id: string) => `href="/console/events/${key(id)}">${key(id)}</a>`,
    )
    .replace(/\/console\/events\/(\d+)/g, (_m, id: string) => `/console/events/${key(id)}`)
    .replace(/\b([Ee]vent) (\d+)\b/g, (_m, word: string, id: string) => `${word} ${key(id)}`)
    .replace(/\bmessage \d+/g, 'message <id>')
    .replace(/<th scope="row">\d+<\/th>/g, '<th scope="row"><id></th>')
    .replace(/\b(f?before)=\d+/g, '$1=<id>')
    .replace(/\/console\/forwards\/\d+\/replay/g, '/console/forwards/<id>/replay')
    .replace(/<td class="num">\d+\.\d<\/td>/g, '<td class="num"><ms></td>')
    .replace(/<td>[0-9a-f]{8}<\/td>/g, '<td><session tag></td>');
}

/** Cluster mode's overview without its relay block (the replica's own figures, SQLite mode has none). */
function withoutRelay(page: string): string {
  return page.replace(/<h2>Relay \(cluster mode\)<\/h2>.*?(?=<h2>Forwarding<\/h2>)/s, '');
}

/**
 * The hourly charts depend on the hour: two renders on either side of an hour's change differ
 * rightly. Starts the comparison well inside an hour (waits at most 2 minutes for the next one).
 */
async function awayFromTheHour(): Promise<void> {
  const intoHour = Date.now() % 3_600_000;
  if (intoHour > 3_600_000 - 120_000) await new Promise((r) => setTimeout(r, 3_600_000 - intoHour + 1000));
}

describe('one console, two stores', () => {
  it('the same deliveries render the same pages in SQLite mode and in cluster mode', async () => {
    await awayFromTheHour();
    const env = { DESTINATIONS_FILE: destinationsFile() };
    const steps = scenario();
    const lite = await sqliteReceiver(env);
    await play(lite, bed.pool, steps);
    const node = await replica('replica-a', env);
    await play(node, bed.pool, steps);
    const keys = { lite: await eventKeys(lite), node: await eventKeys(node) };
    const idOf = (keyOf: Map<number, string>, key: string) =>
      [...keyOf].find(([, k]) => k === key)?.[0] as number;
    // Dedup key = metadata.webhook_id.
    const preAprovada = (steps[1]!.body as { metadata: { webhook_id: string } }).metadata.webhook_id;
    expect(keys.node.size).toBe(10);

    const clients = { lite: await signedIn(lite), node: await signedIn(node) };
    const paths = (keyOf: Map<number, string>) => [
      '/console',
      '/console/events',
      '/console/events?status=done&evento=proposta.criada',
      '/console/events?json=%7B%22dados%22%3A%7B%22nu_proposta%22%3A9101%7D%7D',
      `/console/events/${idOf(keyOf, preAprovada)}`,
      '/console/deliveries',
      '/console/deliveries?outcome=invalid_signature',
      '/console/proposals',
      '/console/proposals?stage=Proposta',
      '/console/proposals/9101',
      '/console/proposals/ADE-77',
      '/console/averbacoes',
      '/console/dead',
      '/console/forwards',
      '/console/audit',
    ];
    const litePaths = paths(keys.lite);
    const nodePaths = paths(keys.node);
    for (const [i, path] of nodePaths.entries()) {
      const a = await clients.lite.get(litePaths[i] as string);
      const b = await clients.node.get(path);
      expect(a.status).toBe(200);
      expect({ path, status: b.status, page: normalise(withoutRelay(b.raw), keys.node) }).toEqual({
        path,
        status: 200,
        page: normalise(a.raw, keys.lite),
      });
    }

    // Not vacuous: the pages hold the rows, the CPF masked; the overview counted every delivery.
    const proposal = await clients.node.get('/console/proposals/9101');
    expect(proposal.text).toContain(
      '<dt>Status</dt><dd><span class="status status-averbacao_solicitada">averbacao_solicitada</span></dd>',
    );
    expect(proposal.text).not.toMatch(/\d{11}/);
    expect(proposal.text).toMatch(/\*\*\*\.\d{3}\.\d{3}-\*\*/);
    const overview = await clients.node.get('/console');
    expect(overview.text).toContain('Last 24 hours: accepted 9, duplicate 1, quarantined 1, failed 1');
    expect(overview.text).toContain('1 consecutive failed answer (invalid_signature ×1');
    // SERVICE_BASE_URL is unset on the replica: it runs no registry-poll worker, and says so.
    expect(overview.text).toContain('Registry polling is off: SERVICE_BASE_URL is not set');
    expect(overview.text).not.toContain('being polled');
    expect((await clients.node.get('/console/deliveries')).text.match(/<tr><th scope="row">/g)).toHaveLength(
      12,
    );
    expect(await count(bed.pool, "SELECT count(*) AS n FROM console_audit WHERE action = 'sign_in'")).toBe(1);
  }, 300_000);
});

describe('sessions shared by the replicas', () => {
  it('a browser signed in through replica A is signed in at replica B, and signing out at B signs it out at A', async () => {
    const a = await replica('replica-a');
    const b = await replica('replica-b');
    const atA = await signedIn(a);
    const atB = new ConsoleClient(b.url);
    atB.cookie = atA.cookie;
    const page = await atB.get('/console/audit');
    expect(page.status).toBe(200);
    expect(page.text).toContain('<span>Signed in: admin</span>');
    // PostgreSQL keeps the id's SHA-256, never the id.
    const id = (atA.cookie as string).slice('consig_console='.length);
    expect(await rows(bed.pool, 'SELECT id_hash, role FROM console_sessions')).toEqual([
      { id_hash: createHash('sha256').update(id).digest('hex'), role: 'admin' },
    ]);

    // The form B served (its CSRF token comes from the session id) signs out there...
    const out = await atB.post('/console/logout', { _csrf: csrfOf(page.text) });
    expect([out.status, out.location]).toEqual([303, '/console/login']);
    // ...and A no longer knows the session either.
    const after = await atA.get('/console');
    expect([after.status, after.location]).toEqual([303, '/console/login?next=%2Fconsole']);
    expect(await count(bed.pool, 'SELECT count(*) AS n FROM console_sessions')).toBe(0);
    expect(await rows(bed.pool, 'SELECT action, role FROM console_audit ORDER BY id')).toEqual([
      { action: 'sign_in', role: 'admin' },
      { action: 'sign_out', role: 'admin' },
    ]);
  });
});

describe('actions write PostgreSQL', () => {
  it('replays dead events (processed again by the cluster workers), pauses and resumes a destination, each in the audit table; CSRF and the admin role still checked', async () => {
    const node = await replica('replica-a', {
      HANDLER_MAX_ATTEMPTS: '1',
      DESTINATIONS_FILE: destinationsFile([ERP]),
    });
    await installFailureTrigger(bed.pool);
    const bodies = [9501, 9502].map((nu) => delivery('proposta.criada', { nu_proposta: nu }));
    for (const body of bodies) {
      await failEvent(bed.pool, (body.metadata as { webhook_id: string }).webhook_id);
      await sendSigned(node.url, body);
    }
    const statuses = async () =>
      (
        await rows<{ nu_proposta: string; status: string }>(
          bed.pool,
          'SELECT nu_proposta, status FROM events ORDER BY id',
        )
      ).map((e) => `${e.nu_proposta}:${e.status}`);
    await waitFor(async () => (await statuses()).join() === '9501:dead,9502:dead', 'both events dead');
    const [first] = await rows<{ id: string }>(bed.pool, "SELECT id FROM events WHERE nu_proposta = '9501'");
    const id = Number(first!.id);
    const admin = await signedIn(node);
    const viewer = await signedIn(node, VIEWER);
    expect((await admin.get('/console/dead')).text).toContain(`action="/console/events/${id}/replay"`);

    // No CSRF token, or the viewer's session: refused, nothing changed.
    expect((await admin.post(`/console/events/${id}/replay`, {})).status).toBe(403);
    expect((await viewer.post(`/console/events/${id}/replay`, { _csrf: await viewer.csrf() })).status).toBe(
      403,
    );
    expect((await admin.post('/console/forwards/erp/pause', { _csrf: 'forged' })).status).toBe(403);
    expect((await viewer.post('/console/forwards/erp/pause', { _csrf: await viewer.csrf() })).status).toBe(
      403,
    );
    expect(await statuses()).toEqual(['9501:dead', '9502:dead']);
    // Nothing done is audited; the four refusals are (issue 21), each with its reason.
    expect(
      await count(
        bed.pool,
        "SELECT count(*) AS n FROM console_audit WHERE action NOT IN ('sign_in', 'refused')",
      ),
    ).toBe(0);
    expect(
      (
        await rows<{ reason: string }>(
          bed.pool,
          "SELECT reason FROM console_audit WHERE action = 'refused' ORDER BY id",
        )
      ).map((r) => r.reason),
    ).toEqual(['csrf', 'role', 'csrf', 'role']);

    // The handler works again: one replayed by hand, the other by the bulk replay of what is dead.
    await dropFailureTrigger(bed.pool);
    const one = await admin.post(`/console/events/${id}/replay`, { _csrf: await admin.csrf() });
    expect([one.status, one.location]).toEqual([303, `/console/events/${id}?replayed=1`]);
    await waitFor(
      async () => (await statuses()).join() === '9501:done,9502:dead',
      'the replayed event processed',
    );
    const confirm = await admin.get('/console/dead/replay');
    expect(confirm.text).toContain('<h1>Replay 1 event?</h1>');
    const bulk = await admin.post('/console/dead/replay', { _csrf: csrfOf(confirm.text) });
    expect([bulk.status, bulk.location]).toEqual([303, '/console/dead?replayed=1']);
    await waitFor(
      async () => (await statuses()).join() === '9501:done,9502:done',
      'the bulk replay processed',
    );
    expect(
      await rows(bed.pool, "SELECT status FROM proposals WHERE nu_proposta IN ('9501', '9502')"),
    ).toEqual([{ status: 'em_analise' }, { status: 'em_analise' }]);

    // Pause and resume: PostgreSQL's flag, shown on the page; a destination paused in its file stays so.
    const paused = await admin.post('/console/forwards/erp/pause', { _csrf: await admin.csrf() });
    expect([paused.status, paused.location]).toEqual([303, '/console/forwards?done=paused']);
    expect(await rows(bed.pool, "SELECT paused FROM forward_destinations WHERE name = 'erp'")).toEqual([
      { paused: true },
    ]);
    expect((await admin.get('/console/forwards')).text).toContain('action="/console/forwards/erp/resume"');
    const resumed = await admin.post('/console/forwards/erp/resume', { _csrf: await admin.csrf() });
    expect([resumed.status, resumed.location]).toEqual([303, '/console/forwards?done=resumed']);
    expect(await rows(bed.pool, "SELECT paused FROM forward_destinations WHERE name = 'erp'")).toEqual([
      { paused: false },
    ]);
    expect((await admin.post('/console/forwards/crm/resume', { _csrf: await admin.csrf() })).status).toBe(
      409,
    );

    // Each action once in PostgreSQL's audit table, by the admin's session, and on the audit page.
    const tag = (
      await rows<{ session: string }>(
        bed.pool,
        "SELECT session FROM console_audit WHERE action = 'sign_in' AND role = 'admin'",
      )
    )[0]!.session;
    expect(
      await rows(
        bed.pool,
        "SELECT role, session, action, target, detail FROM console_audit WHERE action NOT LIKE 'sign_%' AND action <> 'refused' ORDER BY id",
      ),
    ).toEqual([
      { role: 'admin', session: tag, action: 'replay_event', target: `event:${id}`, detail: null },
      {
        role: 'admin',
        session: tag,
        action: 'replay_bulk',
        target: 'events:dead',
        detail: '{"filter":{},"count":1}',
      },
      { role: 'admin', session: tag, action: 'forward_pause', target: 'destination:erp', detail: null },
      { role: 'admin', session: tag, action: 'forward_resume', target: 'destination:erp', detail: null },
    ]);
    const audit = await viewer.get('/console/audit');
    for (const action of ['replay_event', 'replay_bulk', 'forward_pause', 'forward_resume'])
      expect(audit.text).toContain(`<td>${action}</td><td>admin</td><td>${tag}</td>`);
  });
});

describe('the relay on the overview', () => {
  it("shows the serving replica's spool backlog and relay lag, and each replica's last batch and its delay", async () => {
    // A's relay looks every minute unless a delivery wakes it.
    const a = await replica('replica-a', { RELAY_INTERVAL_MS: '60000' });
    const b = await replica('replica-b');
    await sendSigned(a.url, delivery('proposta.criada', { nu_proposta: 9601 }));
    await sendSigned(b.url, delivery('proposta.criada', { nu_proposta: 9602 }));
    await waitFor(
      async () => (await count(bed.pool, 'SELECT count(*) AS n FROM deliveries')) === 2,
      'both relayed',
    );
    // A delivery acknowledged by A five minutes ago and not relayed yet: written in A's spool
    // without waking its relay.
    const at = new Date(Date.now() - 5 * 60_000 - 5_000).toISOString();
    a.store.db
      .prepare(
        `INSERT INTO deliveries (received_at, path, outcome, http_status, duration_ms, detail)
         VALUES (?, '/webhooks', 'invalid_signature', 401, 1.5, 'signature mismatch')`,
      )
      .run(at);

    const atA = await signedIn(a);
    const atB = new ConsoleClient(b.url);
    atB.cookie = atA.cookie;
    const relayOf = (page: string) =>
      /<h2>Relay \(cluster mode\)<\/h2>(.*?)<h2>Forwarding<\/h2>/s.exec(page)?.[1] ?? '';
    const fromA = relayOf((await atA.get('/console')).text);
    expect(fromA).toContain(
      '<section class="card alarm" aria-labelledby="c-relay"><h2 id="c-relay">Relay backlog (this replica)</h2><p class="big">1</p><p>Deliveries acknowledged here and not yet in PostgreSQL. Relay lag: oldest waiting since 5 min ago.</p></section>',
    );
    expect(fromA).toMatch(
      /<th scope="row">replica-a \(this replica\)<\/th><td><code>[0-9a-f]{8}<\/code><\/td><td class="num">1<\/td>/,
    );
    expect(fromA).toMatch(/<th scope="row">replica-b<\/th>/);
    const fromB = relayOf((await atB.get('/console')).text);
    expect(fromB).toContain(
      '<p class="big">0</p><p>Deliveries acknowledged here and not yet in PostgreSQL. Relay lag: none waiting.</p>',
    );
    expect(fromB).toMatch(/<th scope="row">replica-b \(this replica\)<\/th>/);
    // SQLite mode's overview has no such block (test above); the metric says the same as the card.
    expect(await a.metrics.registry.getSingleMetricAsString('consig_relay_backlog')).toMatch(
      /consig_relay_backlog 1$/m,
    );

    // Woken, A's relay takes it: its backlog is empty, and the delay of its last batch is the five minutes.
    a.runtime.nudge();
    await waitFor(
      async () => (await count(bed.pool, 'SELECT count(*) AS n FROM deliveries')) === 3,
      'relayed',
    );
    const relayed = relayOf((await atA.get('/console')).text);
    expect(relayed).toContain(
      '<p class="big">0</p><p>Deliveries acknowledged here and not yet in PostgreSQL. Relay lag: none waiting.</p>',
    );
    expect(relayed).toMatch(
      /<h2 id="c-relay-delay">Relay delay \(this replica\)<\/h2><p class="big">5 min<\/p>/,
    );
    expect(relayed).toMatch(
      /replica-a \(this replica\)<\/th><td><code>[0-9a-f]{8}<\/code><\/td><td class="num">2<\/td>/,
    );
  });

  it('two replicas rendering the overview at once never count a delivery twice in the hourly rollup', async () => {
    const a = await replica('replica-a');
    const b = await replica('replica-b');
    const clients = [await signedIn(a), await signedIn(b)];
    const other = new ConsoleClient(b.url);
    other.cookie = clients[0]!.cookie;
    clients.push(other);
    let total = 0;
    for (let round = 1; round <= 6; round++) {
      // Deliveries relayed meanwhile (as a relay writes them: one transaction, ids in commit order).
      await bed.pool.query(
        `INSERT INTO deliveries (replica, spool, spool_id, received_at, path, outcome, http_status, duration_ms)
         SELECT 'loader', 'loader-spool', $1 * 10000 + g, now() - (g % 90) * interval '1 minute', '/webhooks',
           CASE WHEN g % 7 = 0 THEN 'duplicate' ELSE 'accepted' END, 200, 1
         FROM generate_series(1, 3000) g`,
        [round],
      );
      total += 3000;
      const pages = await Promise.all([...clients, ...clients].map((c) => c.get('/console')));
      expect(pages.map((p) => p.status)).toEqual(Array(6).fill(200));
    }
    expect(await count(bed.pool, 'SELECT sum(n) AS n FROM console_delivery_hours')).toBe(total);
    const overview = (await clients[0]!.get('/console')).text;
    // Counts are written with a space between thousands (`15 428`).
    const seen = /Last 24 hours: accepted ([\d ]+), duplicate ([\d ]+),/.exec(overview);
    const n = (text: string | undefined) => Number(text?.replace(/ /g, ''));
    expect(n(seen?.[1]) + n(seen?.[2])).toBe(total);
  });
});

describe('PostgreSQL away', () => {
  it('a replica not connected to PostgreSQL yet answers a 503 page to a sign-in, and still acknowledges webhooks', async () => {
    const r = await bed.receiver({
      DATABASE_URL: 'postgres://consig@127.0.0.1:9/nowhere',
      REPLICA_ID: 'replica-z',
    });
    expect(r.runtime.state).toBe('connecting');
    const c = new ConsoleClient(r.url);
    expect((await c.get('/console/login')).status).toBe(200);
    const signIn = await c.post('/console/login', { token: ADMIN });
    expect([signIn.status, signIn.headers.get('retry-after')]).toEqual([503, '1']);
    expect(signIn.text).toContain(
      'PostgreSQL is not reachable from this replica right now: try again in a moment. Nothing was changed.',
    );
    expect(c.cookie).toBeNull();
    expect((await sendSigned(r.url, delivery('proposta.criada', { nu_proposta: 9701 }))).status).toBe(200);
  });

  it('PostgreSQL stopped: every page and action answers 503 with Retry-After, nothing changes, the process stays up; back, the same session goes on', async () => {
    const node = await replica('replica-a', { DESTINATIONS_FILE: destinationsFile([ERP]) });
    await sendSigned(node.url, delivery('proposta.criada', { nu_proposta: 9801 }));
    await settled(node, bed.pool, 1, 1);
    const admin = await signedIn(node);
    const csrf = await admin.csrf();

    bed.pg.kill9();
    for (const [path, form] of [
      ['/console', undefined],
      ['/console/proposals/9801', undefined],
      ['/console/events', undefined],
      ['/console/forwards/erp/pause', { _csrf: csrf }],
      ['/console/logout', { _csrf: csrf }],
    ] as const) {
      const answer = form === undefined ? await admin.get(path) : await admin.post(path, form);
      expect({ path, status: answer.status, retryAfter: answer.headers.get('retry-after') }).toEqual({
        path,
        status: 503,
        retryAfter: '1',
      });
      expect(answer.text).toContain('<h1>Unavailable</h1>');
      expect(answer.text).toContain('PostgreSQL is not reachable from this replica');
    }
    expect(admin.cookie).not.toBeNull();
    expect(
      (await sendSigned(node.url, delivery('proposta.pre_aprovada', { nu_proposta: 9801 }))).status,
    ).toBe(200);

    await bed.pg.restart({ mode: 'fast' });
    const back = await waitFor(async () => {
      const page = await admin.get('/console/forwards');
      return page.status === 200 && page;
    }, 'the console answering again');
    // The same session, nothing paused, no action recorded.
    expect(back.text).toContain('action="/console/forwards/erp/pause"');
    await waitFor(
      async () =>
        (await count(bed.pool, 'SELECT count(*) AS n FROM forward_destinations WHERE paused')) === 0,
      'read',
    );
    expect(
      await count(bed.pool, "SELECT count(*) AS n FROM console_audit WHERE action NOT IN ('sign_in')"),
    ).toBe(0);
    expect(await count(bed.pool, 'SELECT count(*) AS n FROM console_sessions')).toBe(1);
  });
});
