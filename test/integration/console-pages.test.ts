import { FakeDestination } from '../helpers/destination';
import { ConsoleClient, csrfOf } from '../helpers/console-client';
import { delivery } from '../helpers/payloads';
import { eventually, startTestReceiver, type TestReceiver } from '../helpers/receiver';

/**
 * Every console page on the real receiver with seeded data (signed deliveries over HTTP, the real
 * pipeline, a real forwarding destination): 200 with the `<h1>` the browser tests rely on, the
 * proposal's timeline in order, the CPF masked, hostile values escaped, bad filters a 400 page,
 * keyset pages disjoint.
 */

const ADMIN = 'admin-token-pages-0123';
const XSS = '<script>alert(1)</script>';

let r: TestReceiver;
let lender: FakeDestination;
let c: ConsoleClient;

const statusOf = (id: number) =>
  (r.store.db.prepare('SELECT status FROM events WHERE id = ?').get(id) as { status: string } | undefined)
    ?.status;

beforeAll(async () => {
  lender = await FakeDestination.start();
  r = await startTestReceiver({
    env: {
      ADMIN_TOKEN: ADMIN,
      FORWARD_URL: `http://127.0.0.1:${lender.port}/hook`,
      FORWARD_SECRET: 'forward-secret',
    },
  });
  // Proposal 555: created, approved, then a late proposta.criada duplicate-free repeat of an
  // earlier step, an averbação requested and its registry result.
  const sent: number[] = [];
  for (const evento of [
    'proposta.criada',
    'proposta.aprovada',
    'proposta.pre_aprovada',
    'averbacao.solicitada',
  ]) {
    const res = await r.send(
      delivery(evento, { nu_proposta: 555, dados: { requestId: 'req-555', no_conveniada: 'ACME' } }),
    );
    sent.push(res.body.event_id as number);
  }
  const dup = delivery('proposta.criada', { nu_proposta: 556, webhook_id: 'wh-dup-556' });
  await r.send(dup);
  await r.send(dup);
  await r.send({ requestId: 'req-555', status: 'completed' }, '/webhooks/registry');
  // Hostile values: an unknown evento with markup, and markup in the body.
  await r.send({ evento: XSS, dados: { nu_proposta: 557, note: XSS, nu_cpf: '98765432100' } });
  await eventually(() => sent.every((id) => statusOf(id) === 'done'), 'processed');
  await eventually(() => lender.requests.length >= 4, 'forwarded');
  c = new ConsoleClient(r.url);
  await c.signIn(ADMIN);
});
afterAll(async () => {
  await r.stop();
  await lender.close();
});

describe('pages', () => {
  it.each([
    ['/console', 'Overview'],
    ['/console/proposals', 'Proposals'],
    ['/console/proposals/555', 'Proposal 555'],
    ['/console/events', 'Events'],
    ['/console/events/1', 'Event 1'],
    ['/console/deliveries', 'Deliveries'],
    ['/console/dead', 'Dead letters'],
    ['/console/averbacoes', 'Averbações'],
    ['/console/forwards', 'Forwarding'],
    ['/console/audit', 'Audit'],
  ])('%s answers 200 with <h1>%s</h1>, the navigation and landmarks', async (path, h1) => {
    const res = await c.get(path);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    expect(res.text).toContain(`<h1>${h1}</h1>`);
    expect(res.text).toContain('<html lang="en">');
    expect(res.text).toContain('<meta name="viewport" content="width=device-width, initial-scale=1">');
    expect(res.text).toContain('<a class="skip-link" href="#main">');
    expect(res.text).toContain('<nav aria-label="Console">');
    expect(res.text).toContain('<main id="main"');
    expect(res.text.match(/aria-current="page"/g)?.length ?? 0).toBeLessThanOrEqual(1);
    // Every input has a label pointing at it.
    for (const [, id] of res.text.matchAll(/<(?:input|select)[^>]* id="([^"]+)"/g)) {
      expect(res.text).toContain(`<label for="${id}">`);
    }
  });

  it('marks the current page in the navigation', async () => {
    expect((await c.get('/console/events')).text).toContain(
      '<a href="/console/events" aria-current="page">Events</a>',
    );
  });

  it('draws the overview charts as labelled SVG from the rollup, and counts each delivery once', async () => {
    const res = await c.get('/console');
    // Each chart drawn twice: for a desktop and for a phone (console.css shows one).
    const charts =
      res.text.match(/<svg class="chart chart-(wide|narrow)" role="img" aria-label="[^"]+"/g) ?? [];
    expect(charts.length).toBe(4);
    expect(res.text).toContain('<title>Deliveries per hour, last 24 hours</title>');
    const total = (r.store.db.prepare('SELECT count(*) AS n FROM deliveries').get() as { n: number }).n;
    expect(res.text).toContain(`Deliveries per hour, last 24 hours: ${total} in total`);
    await c.get('/console');
    const counted = r.store.db.prepare('SELECT sum(n) AS n FROM console_delivery_hours').get() as {
      n: number;
    };
    expect(counted.n).toBe(total);
  });

  it("tells a proposal's story as one timeline in time order, with late transitions explained", async () => {
    const res = await c.get('/console/proposals/555');
    const items = [...res.text.matchAll(/<li data-kind="(\w+)"><time datetime="([^"]+)">/g)].map((m) => ({
      kind: m[1] as string,
      at: m[2] as string,
    }));
    expect(items.length).toBeGreaterThanOrEqual(10);
    expect(items.map((i) => i.at)).toEqual([...items.map((i) => i.at)].sort());
    const kinds = new Set(items.map((i) => i.kind));
    for (const kind of ['event', 'transition', 'averbacao', 'forward']) expect(kinds).toContain(kind);
    expect(res.text).toContain('<ol class="timeline">');
    expect(res.text).toContain('recorded, not applied');
    expect(res.text).toContain('out of order: an earlier step arrived after a later one');
    expect(res.text).toContain('***.456.789-**');
    expect(res.raw).not.toContain('12345678909');
    expect(res.text).toContain('ACME');
  });

  it('shows a duplicate on the timeline', async () => {
    const res = await c.get('/console/proposals/556');
    expect(res.text).toContain('data-kind="duplicate"');
    expect(res.text).toContain('1 duplicate delivery');
  });

  it('shows an event body pretty-printed with the CPF masked', async () => {
    const res = await c.get('/console/events/1');
    expect(res.raw).toMatch(/<pre class="body"[^>]*>\{\n {2}&quot;evento&quot;: &quot;proposta.criada&quot;/);
    expect(res.raw).toContain('&quot;nu_cpf&quot;: &quot;***.456.789-**&quot;');
    expect(res.raw).not.toContain('12345678909');
    expect(res.text).toContain('Forwarded as');
  });

  it('searches a proposal by nu_proposta: found → its page, not found → says so', async () => {
    const found = await c.get('/console/proposals?nu=555');
    expect(found.status).toBe(303);
    expect(found.location).toBe('/console/proposals/555');
    const missing = await c.get('/console/proposals?nu=999999');
    expect(missing.status).toBe(404);
    expect(missing.text).toContain('No proposal 999999.');
    expect((await c.get('/console/proposals/999999')).status).toBe(404);
  });

  it('filters proposals by status, stage and age, and draws the funnel', async () => {
    const res = await c.get('/console/proposals?stage=Averba%C3%A7%C3%A3o');
    expect(res.text).toContain('<a href="/console/proposals/555">555</a>');
    expect(res.text).not.toContain('<a href="/console/proposals/556">556</a>');
    expect(res.text).toContain('aria-label="Proposals by stage and status:');
    const old = await c.get('/console/proposals?age=1d');
    expect(old.text).toContain('none match');
    const stuck = await c.get('/console/proposals?stuck=yes');
    expect(stuck.status).toBe(200);
  });

  it('lists averbações, deliveries and destinations', async () => {
    expect((await c.get('/console/averbacoes?status=completed')).text).toContain('req-555');
    expect((await c.get('/console/averbacoes?waiting=yes')).text).not.toContain(
      '<th scope="row">req-555</th>',
    );
    expect((await c.get('/console/deliveries?outcome=duplicate')).text).toContain(
      '<span class="status status-duplicate">duplicate</span>',
    );
    const forwards = await c.get('/console/forwards');
    expect(forwards.text).toContain('<th scope="row">default</th>');
    expect(forwards.text).toContain('<button type="submit">Pause</button>');
  });

  it('pauses and resumes a destination, audited', async () => {
    const page = await c.get('/console/forwards');
    const paused = await c.post('/console/forwards/default/pause', { _csrf: csrfOf(page.text) });
    expect(paused.status).toBe(303);
    expect(
      (
        r.store.db.prepare("SELECT paused FROM forward_destinations WHERE name = 'default'").get() as {
          paused: number;
        }
      ).paused,
    ).toBe(1);
    const after = await c.get(paused.location as string);
    expect(after.text).toContain('Destination paused.');
    expect(after.text).toContain('<button type="submit">Resume</button>');
    expect((await c.post('/console/forwards/default/resume', { _csrf: csrfOf(after.text) })).status).toBe(
      303,
    );
    expect(
      (
        r.store.db.prepare("SELECT paused FROM forward_destinations WHERE name = 'default'").get() as {
          paused: number;
        }
      ).paused,
    ).toBe(0);
    expect((await c.post('/console/forwards/nope/pause', { _csrf: csrfOf(after.text) })).status).toBe(404);
    const actions = r.store.db
      .prepare("SELECT action, target FROM console_audit WHERE action LIKE 'forward_%' ORDER BY id")
      .all();
    expect(actions).toEqual([
      { action: 'forward_pause', target: 'destination:default' },
      { action: 'forward_resume', target: 'destination:default' },
    ]);
    const audit = await c.get('/console/audit');
    expect(audit.text).toContain('forward_pause');
  });
});

describe('forward dead letters', () => {
  const deliveriesOf = (nus: number[]) =>
    r.store.db
      .prepare(
        `SELECT d.id, d.status, d.last_error FROM forward_deliveries d JOIN forward_messages m ON m.id = d.message_id
         WHERE m.nu_proposta IN (${nus.join(', ')}) ORDER BY d.id`,
      )
      .all() as { id: number; status: string; last_error: string | null }[];

  it('lists a dead forward delivery, replays it one by one and in bulk after a count', async () => {
    const count = (status: string) =>
      (
        r.store.db.prepare('SELECT count(*) AS n FROM forward_deliveries WHERE status = ?').get(status) as {
          n: number;
        }
      ).n;
    // What the seeds sent is settled first: only these two proposals' deliveries are refused.
    await eventually(() => count('pending') === 0 && count('dead') === 0, 'earlier deliveries settled');
    lender.respond = () => ({ status: 400 });
    const nus = [558, 559];
    const ids: number[] = [];
    for (const nu of nus)
      ids.push((await r.send(delivery('proposta.criada', { nu_proposta: nu }))).body.event_id as number);
    await eventually(() => ids.every((id) => statusOf(id) === 'done'), 'processed');
    await eventually(() => {
      const rows = deliveriesOf(nus);
      return rows.length >= 2 && rows.every((d) => d.status === 'dead');
    }, 'every delivery refused for good');
    const [first, ...others] = deliveriesOf(nus) as unknown as [{ id: number }, ...{ id: number }[]];
    const page = await c.get('/console/dead?destination=default');
    expect(page.text).toContain(`<th scope="row">${first.id}</th>`);
    lender.respond = () => undefined;
    const one = await c.post(`/console/forwards/${first.id}/replay`, { _csrf: csrfOf(page.text) });
    expect(one.status).toBe(303);
    await eventually(() => deliveriesOf(nus)[0]?.status === 'delivered', 'delivered after replay');
    const n = others.length;
    expect(count('dead')).toBe(n);
    const confirm = await c.get('/console/forwards/replay?destination=default');
    expect(confirm.text).toContain(`<h1>Replay ${n} forward ${n === 1 ? 'delivery' : 'deliveries'}?</h1>`);
    const bulk = await c.post('/console/forwards/replay', {
      _csrf: csrfOf(confirm.text),
      destination: 'default',
    });
    expect(bulk.location).toBe(`/console/dead?replayed=${n}`);
    await eventually(() => deliveriesOf(nus).every((d) => d.status === 'delivered'), 'all delivered');
    const audit = r.store.db
      .prepare("SELECT action, target FROM console_audit WHERE action LIKE 'forward_replay%' ORDER BY id")
      .all();
    expect(audit).toEqual([
      { action: 'forward_replay', target: `forward:${first.id}` },
      { action: 'forward_replay_bulk', target: 'destination:default' },
    ]);
  });
});

describe('events list', () => {
  it('matches a partial JSON body, and says when the filter is not indexed', async () => {
    const json = encodeURIComponent('{"dados":{"no_conveniada":"ACME","nu_proposta":555}}');
    const res = await c.get(`/console/events?json=${json}`);
    expect(res.status).toBe(200);
    const ids = [...res.text.matchAll(/<th scope="row"><a href="\/console\/events\/(\d+)">/g)].map((m) =>
      Number(m[1]),
    );
    expect(ids.length).toBe(4);
    const none = await c.get(
      `/console/events?json=${encodeURIComponent('{"dados":{"no_conveniada":"nobody"}}')}`,
    );
    expect(none.text).toContain('none match these filters');
  });

  it('keeps every filter in the URL of the next page, and pages are disjoint', async () => {
    for (let i = 0; i < 60; i++) await r.send(delivery('proposta.criada', { nu_proposta: 800000 + i }));
    const first = await c.get('/console/events?kind=event');
    const idsOf = (text: string) =>
      [...text.matchAll(/<th scope="row"><a href="\/console\/events\/(\d+)">/g)].map((m) => Number(m[1]));
    const a = idsOf(first.text);
    expect(a.length).toBe(50);
    const next = /<a href="([^"]+)" rel="next">/.exec(first.text)?.[1]?.replace(/&amp;/g, '&');
    expect(next).toMatch(/^\/console\/events\?kind=event&before=\d+$/);
    const b = idsOf((await c.get(next as string)).text);
    expect(b.length).toBeGreaterThan(0);
    expect(a.filter((id) => b.includes(id))).toEqual([]);
    expect(Math.min(...a)).toBeGreaterThan(Math.max(...b));
    expect([...a, ...b]).toEqual([...a, ...b].sort((x, y) => y - x));
  });

  it('filters by time range', async () => {
    const future = await c.get('/console/events?from=2999-01-01');
    expect(future.text).toContain('none match these filters');
    const past = await c.get('/console/events?to=2000-01-01T00:00');
    expect(past.text).toContain('none match these filters');
    const all = await c.get('/console/events?nu_proposta=555&from=2000-01-01&to=2999-01-01T00:00:00Z');
    expect(all.text).toContain('<a href="/console/events/1">1</a>');
  });
});

describe('hostile input', () => {
  it('escapes markup from stored events and from filters', async () => {
    const list = await c.get('/console/events?status=ignored');
    expect(list.raw).not.toContain(XSS);
    expect(list.raw).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
    const id = Number(
      /<a href="\/console\/events\/(\d+)">\d+<\/a><\/th><td><time[^>]*>[^<]*<\/time><\/td><td>&lt;script/.exec(
        list.text,
      )?.[1],
    );
    const event = await c.get(`/console/events/${id}`);
    expect(event.raw).not.toContain(XSS);
    expect(event.raw).not.toContain('98765432100');
    const filter = await c.get(
      `/console/events?evento=${encodeURIComponent('"><img src=x onerror=alert(1)>')}`,
    );
    expect(filter.status).toBe(200);
    expect(filter.raw).not.toContain('<img src=x');
    expect(filter.raw).toContain('value="&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"');
  });

  it.each([
    ['/console/events?status=nope', 'status: expected one of'],
    ['/console/events?status=done&status=dead', 'status: give it once'],
    ['/console/events?before=abc', 'before: expected a positive whole number'],
    ['/console/events?from=yesterday', 'from: expected a date'],
    ['/console/events?from=2026-02-30', 'from: expected a date'],
    ['/console/events?from=2026-01-02&to=2026-01-01', 'from: must be before to'],
    ['/console/events?json=%7Bbad', 'json: not valid JSON'],
    ['/console/events?json=%5B1%5D', 'json: expected a non-empty object'],
    ['/console/events?json=%7B%22a%22%3A%5B1%5D%7D', 'json: arrays cannot be matched'],
    ['/console/events?evento=xxx…(5000 characters)', 'evento: at most 100 characters'],
    ['/console/proposals?age=soon', 'age: expected a duration'],
    ['/console/proposals?status=paid', 'status: expected one of'],
    ['/console/proposals?after=garbage', 'after: not a cursor'],
    ['/console/averbacoes?stale=maybe', 'stale: expected yes or no'],
    ['/console/deliveries?outcome=%3Cb%3E', 'outcome: expected one of'],
    ['/console/events/abc', 'id: expected a positive whole number'],
  ])('%s → 400 saying what is wrong', async (path, message) => {
    const res = await c.get(path.replace('xxx…(5000 characters)', 'x'.repeat(5000)));
    expect(res.status).toBe(400);
    expect(res.text).toContain(message);
    expect(res.text).toContain('<nav aria-label="Console">');
  });

  it('answers 404 pages for what does not exist', async () => {
    expect((await c.get('/console/events/99999999')).status).toBe(404);
    expect((await c.get('/console/nothing-here')).status).toBe(404);
  });
});
