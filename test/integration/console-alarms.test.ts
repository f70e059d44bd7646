import { FakeDestination } from '../helpers/destination';
import { ConsoleClient } from '../helpers/console-client';
import { type FakeService, startFakeService } from '../helpers/fake-service';
import { delivery } from '../helpers/payloads';
import { eventually, startTestReceiver, type TestReceiver } from '../helpers/receiver';

/**
 * Issue 21 (items 7–9), what the console says on a real receiver: dead forward deliveries are an
 * alarm card on the overview like dead events; with SERVICE_BASE_URL unset the overview, the
 * averbações and the proposal's timeline say that polling is off and why instead of "being polled"
 * and a "next poll" that never comes (set, they show the polls); counts take the right plural.
 */

const ADMIN = 'admin-token-alarms-0123456789';

/** The overview's card with this heading id, as one string. */
function card(page: string, id: string): string {
  const at = page.indexOf(`aria-labelledby="${id}"`);
  if (at < 0) throw new Error(`no card ${id}`);
  return page.slice(page.lastIndexOf('<section', at), page.indexOf('</section>', at));
}

describe('SERVICE_BASE_URL unset: polling off, and a lender refusing deliveries', () => {
  let r: TestReceiver;
  let lender: FakeDestination;
  let c: ConsoleClient;
  const refused = new Set<number>();

  beforeAll(async () => {
    lender = await FakeDestination.start((req) => {
      const nu = /"nu_proposta":\s*(\d+)/.exec(req.raw.toString('utf8'))?.[1];
      return nu !== undefined && refused.has(Number(nu)) ? { status: 400 } : undefined;
    });
    r = await startTestReceiver({
      env: {
        ADMIN_TOKEN: ADMIN,
        FORWARD_URL: `http://127.0.0.1:${lender.port}/hook`,
        FORWARD_SECRET: 'forward-secret-alarms',
      },
    });
    for (const evento of ['proposta.criada', 'averbacao.solicitada'])
      await r.send(delivery(evento, { nu_proposta: 701, dados: { requestId: 'req-701' } }));
    await eventually(() => lender.accepted().length >= 4, 'forwarded');
    c = new ConsoleClient(r.url);
    await c.signIn(ADMIN);
  });
  afterAll(async () => {
    await r?.stop();
    await lender?.close();
  });

  it("answers /favicon.ico with the console's icon (a browser asks for it on a page that declares none)", async () => {
    const icon = await fetch(`${r.url}/favicon.ico`);
    expect(icon.status).toBe(200);
    expect(icon.headers.get('content-type')).toMatch(/^image\/svg\+xml/);
    expect(await icon.text()).toMatch(/^<svg /);
  });

  it('says on the overview that polling is off and why, not "being polled"', async () => {
    const averb = card((await c.get('/console')).text, 'c-averb');
    expect(averb).toContain('1 waiting for a result');
    expect(averb).not.toContain('being polled');
    expect(averb).toContain(
      'Registry polling is off: SERVICE_BASE_URL is not set (results come by webhook only).',
    );
  });

  it('shows no "next poll" in the past on the averbações and on the timeline', async () => {
    const list = (await c.get('/console/averbacoes')).text;
    expect(list).toContain(
      'Registry polling is off: SERVICE_BASE_URL is not set in this receiver&#39;s configuration, so no poller runs here. Results come only by the registry webhook.',
    );
    expect(list).toMatch(
      /<th scope="row">req-701<\/th>(<td[^>]*>[^]*?<\/td>){6}<td>none \(polling off\)<\/td>/,
    );
    expect(list).toContain('<label for="f-waiting">Waiting for a result</label>');
    const timeline = (await c.get('/console/proposals/701')).text;
    expect(timeline).toContain('next poll none (polling off)');
    expect(timeline).not.toMatch(/next poll ?<time/);
  });

  it('counts in the singular when there is one ("after 1 attempt")', async () => {
    const timeline = (await c.get('/console/proposals/701')).text;
    expect(timeline).toContain('after 1 attempt');
    expect(timeline).not.toContain('after 1 attempts');
    const overview = (await c.get('/console')).text;
    expect(overview).toContain('0 consecutive failed answers.');
  });

  it('raises a red card for dead forward deliveries, like dead events', async () => {
    const fine = card((await c.get('/console')).text, 'c-dead-fwd');
    expect(fine).toContain('class="card fine"');
    expect(fine).toContain('<p class="big">0</p>');

    refused.add(702);
    await r.send(delivery('proposta.criada', { nu_proposta: 702 }));
    const dead = r.store.db.prepare("SELECT count(*) AS n FROM forward_deliveries WHERE status = 'dead'");
    await eventually(() => (dead.get() as { n: number }).n === 2, 'both deliveries refused for good');

    const raised = card((await c.get('/console')).text, 'c-dead-fwd');
    expect(raised).toContain('class="card alarm"');
    expect(raised).toContain('<h2 id="c-dead-fwd">Dead forward deliveries</h2>');
    expect(raised).toContain('<p class="big">2</p>');
    expect(raised).toContain('<a href="/console/dead?destination=default#dead-forwards">default</a>2');
    expect(raised).toContain('<a href="/console/dead#dead-forwards">Review and replay</a>');
    // It leads to the list it counts.
    expect((await c.get('/console/dead')).text).toContain('<h2 id="dead-forwards">Forward deliveries</h2>');
  });
});

describe('SERVICE_BASE_URL set: the polls are shown', () => {
  let r: TestReceiver;
  let service: FakeService;
  let c: ConsoleClient;

  beforeAll(async () => {
    service = await startFakeService();
    // REGISTRY_WEBHOOK_GRACE_MS (2 min by default): the first poll is not due during the test.
    r = await startTestReceiver({
      env: {
        ADMIN_TOKEN: ADMIN,
        SERVICE_BASE_URL: service.url,
        SERVICE_ACCESS_TOKEN: 'service-token-alarms',
      },
    });
    await r.send(delivery('averbacao.solicitada', { nu_proposta: 703, dados: { requestId: 'req-703' } }));
    await eventually(
      () => r.store.db.prepare("SELECT 1 FROM averbacoes WHERE request_id = 'req-703'").get() !== undefined,
      'tracked',
    );
    c = new ConsoleClient(r.url);
    await c.signIn(ADMIN);
  });
  afterAll(async () => {
    await r?.stop();
    await service?.close();
  });

  it('says "being polled" and the next poll, and nothing about polling being off', async () => {
    const overview = (await c.get('/console')).text;
    expect(card(overview, 'c-averb')).toContain('1 being polled');
    expect(overview).not.toContain('polling is off');
    const list = (await c.get('/console/averbacoes')).text;
    expect(list).not.toContain('polling off');
    expect(list).toMatch(/<th scope="row">req-703<\/th>(<td[^>]*>[^]*?<\/td>){6}<td><time datetime=/);
    expect((await c.get('/console/proposals/703')).text).toMatch(/next poll ?<time datetime=/);
  });
});
