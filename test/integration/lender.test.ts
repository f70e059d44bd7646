import { standardWebhookHeaders } from '../../src/domain/forwarding/standard-webhooks';
import {
  type LenderConsumer,
  type LenderConsumerOptions,
  type Refusal,
  startLenderConsumer,
} from '../../src/lender/consumer';
import { messageLine } from '../../src/lender/message-line';
import { lenderCommand } from '../../src/cli/lender-command';
import { checkLender } from '../../src/cli/demo/lender-summary';
import type { DemoLender } from '../../src/cli/demo/lenders';
import { delivery, eventually, startTestReceiver, type TestReceiver } from '../helpers/receiver';

/**
 * The lender's consumer (src/lender/) over real HTTP: what the receiver's signer produces, the
 * standardwebhooks library accepts; one thing broken per test.
 */

const SECRET = `whsec_${Buffer.from('a lender secret of 32 bytes.....').toString('base64')}`;

let consumers: LenderConsumer[] = [];
afterEach(async () => {
  await Promise.all(consumers.map((c) => c.close()));
  consumers = [];
});

async function start(options: Partial<LenderConsumerOptions> = {}) {
  const shown: string[] = [];
  const refusals: Refusal[] = [];
  const consumer = await startLenderConsumer({
    secrets: [SECRET],
    onMessage: ({ message }) => shown.push(messageLine(message)),
    onRefused: (r) => refusals.push(r),
    ...options,
  });
  consumers.push(consumer);
  return { consumer, shown, refusals };
}

let seq = 0;
function message(nu = 100001, to = 'pre_aprovada') {
  seq += 1;
  const id = `msg_test_${seq}`;
  const body = JSON.stringify({
    id,
    type: 'proposal.changed',
    created_at: '2025-01-01T00:00:00.000Z',
    data: { nu_proposta: nu, evento: 'proposta.pre_aprovada', from: 'em_analise', to, applied: true },
  });
  return { id, body };
}

const nowSeconds = () => Math.floor(Date.now() / 1000);

/** The headers the receiver's sender puts on `m` (src/domain/forwarding/standard-webhooks.ts). */
function signed(m: { id: string; body: string }, secrets = [SECRET], timestampSeconds = nowSeconds()) {
  return standardWebhookHeaders({ id: m.id, timestampSeconds, body: m.body }, secrets);
}

async function send(url: string, headers: Record<string, string>, body: string) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
  });
  return { status: res.status, text: await res.text() };
}

/** POSTs `m` signed as the receiver signs it, with `secrets` (default: the consumer's). */
function post(url: string, m: { id: string; body: string }, secrets = [SECRET]) {
  return send(url, signed(m, secrets), m.body);
}

it('accepts a message signed by the receiver and shows it as one line', async () => {
  const { consumer, shown } = await start();
  const m = message(100001, 'pre_aprovada');
  expect((await post(consumer.url, m)).status).toBe(200);
  expect(shown).toEqual(['proposal.changed 100001 em_analise → pre_aprovada']);
  expect(consumer.received).toHaveLength(1);
  expect(consumer.received[0]).toMatchObject({ webhookId: m.id, failedBefore: 0, message: { id: m.id } });
});

it('accepts any one of several signatures (a rotation), and a plain-string secret keyed by its bytes', async () => {
  const { consumer } = await start({ secrets: ['plain lender secret'] });
  const m = message();
  const res = await post(consumer.url, m, ['whsec_b2xk', 'plain lender secret']);
  expect(res.status).toBe(200);
  expect(consumer.received).toHaveLength(1);
});

type Request = { headers: Record<string, string>; body: string };
it.each<[string, (m: { id: string; body: string }) => Request, string]>([
  [
    'a signature by another secret',
    (m) => ({ headers: signed(m, ['whsec_b3RoZXIgc2VjcmV0']), body: m.body }),
    'No matching signature found',
  ],
  [
    'a body changed after signing',
    (m) => ({ headers: signed(m), body: m.body.replace('100001', '100002') }),
    'No matching signature found',
  ],
  [
    'no signature header',
    (m) => {
      const { 'webhook-signature': _dropped, ...headers } = signed(m);
      return { headers, body: m.body };
    },
    'Missing required headers',
  ],
  [
    'a timestamp an hour old',
    (m) => ({ headers: signed(m, [SECRET], nowSeconds() - 3600), body: m.body }),
    'Message timestamp too old',
  ],
])('refuses %s with 401 and shows nothing', async (_what, breakOne, reason) => {
  const { consumer, shown, refusals } = await start();
  const { headers, body } = breakOne(message());
  const res = await send(consumer.url, headers, body);
  expect(res).toEqual({ status: 401, text: `${reason}\n` });
  expect(shown).toEqual([]);
  expect(consumer.received).toHaveLength(0);
  expect(consumer.counts.refused).toBe(1);
  expect(refusals).toEqual([{ status: 401, reason }]);
});

it('answers 503 to the first N messages, then accepts them when they come again', async () => {
  const { consumer, refusals } = await start({ failFirst: 2 });
  const a = message(100001);
  const b = message(100002);
  expect((await post(consumer.url, a)).status).toBe(503);
  expect((await post(consumer.url, b)).status).toBe(503);
  expect((await post(consumer.url, a)).status).toBe(200);
  expect((await post(consumer.url, b)).status).toBe(200);
  expect(consumer.counts.failed).toBe(2);
  expect(refusals.map((r) => [r.status, r.message?.id])).toEqual([
    [503, a.id],
    [503, b.id],
  ]);
  expect(consumer.received.map((r) => [r.webhookId, r.failedBefore])).toEqual([
    [a.id, 1],
    [b.id, 1],
  ]);
});

it('a bad signature is refused with 401 even while failing, and does not use up a 503', async () => {
  const { consumer } = await start({ failFirst: 1 });
  expect((await post(consumer.url, message(), ['whsec_b3RoZXI='])).status).toBe(401);
  expect((await post(consumer.url, message())).status).toBe(503);
  expect((await post(consumer.url, message())).status).toBe(200);
});

it('answers 200 to a repeated webhook-id without showing it twice', async () => {
  const { consumer, shown } = await start();
  const m = message();
  expect((await post(consumer.url, m)).status).toBe(200);
  expect((await post(consumer.url, m)).status).toBe(200);
  expect(shown).toHaveLength(1);
  expect(consumer.received).toHaveLength(1);
  expect(consumer.counts.duplicates).toBe(1);
});

it('keeps the messages in the order they arrived', async () => {
  const { consumer } = await start();
  const sent = [message(100001, 'pre_aprovada'), message(100002, 'negada'), message(100001, 'aprovada')];
  for (const m of sent) expect((await post(consumer.url, m)).status).toBe(200);
  expect(consumer.received.map((r) => r.webhookId)).toEqual(sent.map((m) => m.id));
});

it('answers 400 to a signed body that is not JSON and 405 to anything but POST', async () => {
  const { consumer } = await start();
  expect((await post(consumer.url, { id: 'msg_x', body: 'not json' })).status).toBe(400);
  expect((await fetch(consumer.url)).status).toBe(405);
  expect(consumer.received).toHaveLength(0);
});

it('`lender` prints each message as one line with its time, and refusals too, until a signal', async () => {
  const lines: string[] = [];
  let stop: (signal: NodeJS.Signals) => void = () => undefined;
  let started: (consumer: LenderConsumer) => void = () => undefined;
  const listening = new Promise<LenderConsumer>((resolve) => (started = resolve));
  const running = lenderCommand(
    { port: '0', secret: [SECRET], failFirst: '1' },
    { out: (text) => lines.push(text) },
    {
      now: () => new Date('2025-01-02T03:04:05.000Z'),
      onStarted: started,
      onSignal: (listener) => {
        stop = listener;
        return () => undefined;
      },
    },
  );
  const consumer = await listening;
  const m = message(100007, 'aprovada');
  expect((await post(consumer.url, m)).status).toBe(503);
  expect((await post(consumer.url, m)).status).toBe(200);
  expect((await post(consumer.url, message(), ['whsec_b3RoZXI='])).status).toBe(401);
  stop('SIGTERM');
  await running;
  expect(lines).toEqual([
    `lender consumer listening on ${consumer.url} (Standard Webhooks, verified with standardwebhooks)`,
    `  point the receiver at it: FORWARD_URL=${consumer.url} FORWARD_SECRET=<the same secret>`,
    '  answering 503 to the first 1 messages',
    'Ctrl-C to stop',
    '2025-01-02T03:04:05.000Z 503 proposal.changed 100007 em_analise → aprovada: down for a while (on purpose)',
    '2025-01-02T03:04:05.000Z proposal.changed 100007 em_analise → aprovada',
    '2025-01-02T03:04:05.000Z 401 No matching signature found',
    'received 1 messages (0 repeats, 1 answered 503, 1 refused)',
  ]);
});

it('`lender` refuses to start without a secret or with a whsec_ secret that is not base64', async () => {
  await expect(lenderCommand({ port: '0' }, { out: () => undefined })).rejects.toThrow(
    /--secret is required/,
  );
  await expect(lenderCommand({ port: '0', secret: ['whsec_!!'] }, { out: () => undefined })).rejects.toThrow(
    /must be base64/,
  );
});

describe("the receiver's sender → this consumer, and the demo's verdict on what arrived", () => {
  const FORWARD_SECRET = 'a plain forward secret';
  let receiver: TestReceiver;
  let lender: DemoLender;

  beforeAll(async () => {
    const consumer = await startLenderConsumer({ secrets: [FORWARD_SECRET], onMessage: () => undefined });
    lender = { name: 'default', types: ['*'], consumer };
    receiver = await startTestReceiver({ env: { FORWARD_URL: consumer.url, FORWARD_SECRET } });
    for (const [evento, nu] of [
      ['proposta.pre_aprovada', 71],
      ['proposta.pre_aprovada', 72],
      ['proposta.aprovada', 71],
      ['proposta.aprovada', 72],
    ] as const) {
      expect((await receiver.send(delivery(evento, { nu_proposta: nu }))).status).toBe(200);
    }
    // Processed first (the outbox is written then; before it, nothing pending reads as settled),
    // then every message forwarded.
    const open = receiver.store.db.prepare("SELECT count(*) AS n FROM events WHERE status <> 'done'");
    await eventually(() => (open.get() as { n: number }).n === 0, 'every event processed');
    await eventually(() => checkLender(receiver.store, lender).settled, 'every message forwarded');
  });
  afterAll(async () => {
    await receiver.stop();
    await lender.consumer.close();
  });

  /** The same destination, as if its consumer had recorded `received` instead. */
  const withReceived = (received: (typeof lender.consumer.received)[number][]): DemoLender => ({
    ...lender,
    consumer: { ...lender.consumer, received },
  });

  it('verifies what the sender signs, and the verdict says yes', () => {
    const changes = lender.consumer.received.filter((r) => r.message.type === 'proposal.changed');
    expect(changes.map((r) => messageLine(r.message))).toEqual(
      expect.arrayContaining([
        'proposal.changed 71 pre_aprovada → aprovada',
        'proposal.changed 72 pre_aprovada → aprovada',
      ]),
    );
    expect(lender.consumer.counts).toEqual({ duplicates: 0, failed: 0, refused: 0 });
    expect(checkLender(receiver.store, lender)).toMatchObject({
      order: 'every proposal in order',
      ok: 'yes',
    });
  });

  it("says NO when a proposal's messages arrived out of order", () => {
    const reversed = withReceived([...lender.consumer.received].reverse());
    expect(checkLender(receiver.store, reversed)).toMatchObject({ order: 'OUT OF ORDER: 71, 72', ok: 'NO' });
  });

  it('says NO when a delivered message never arrived', () => {
    const oneLost = withReceived(lender.consumer.received.slice(1));
    expect(checkLender(receiver.store, oneLost)).toMatchObject({
      order: '1 delivered but not received',
      ok: 'NO',
      settled: false,
    });
  });
});
