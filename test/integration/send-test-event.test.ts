import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { sendTestEventCommand } from '../../src/cli/send-test-event';
import { verifySignature } from '../../src/domain/signature';
import { createLogger } from '../../src/logger';
import { type Evento, type Simulator, startSimulator } from '../../src/simulator';

/**
 * What a test event and the simulator's own deliveries look like on the wire, checked against
 * values written out here, not read from the table that produces them.
 */

const SECRET = 'test-event-secret';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The `st_proposta` the service sends with each event of the interface §6.2 catalogue. */
const ST_PROPOSTA: Record<Evento, string> = {
  'proposta.criada': 'em_analise',
  'proposta.pre_aprovada': 'pre_aprovada',
  'proposta.aprovada': 'aprovada',
  'proposta.negada': 'negada',
  'proposta.cancelada': 'cancelada',
  'averbacao.solicitada': 'averbacao_solicitada',
  'averbacao.aprovada': 'averbada',
  'averbacao.negada': 'averbacao_negada',
  'formalizacao.iniciada': 'formalizacao_iniciada',
  'formalizacao.concluida': 'formalizada',
  'efetivacao.concluida': 'efetivada',
  'pagamento.realizado': 'paga',
  'pagamento.falha': 'pagamento_falhou',
};
const CATALOGUE = Object.keys(ST_PROPOSTA) as Evento[];

interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  raw: Buffer;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- deliveries are read loosely in tests
  json: any;
}

/** A loopback receiver that records every request and answers 200. */
async function recorder(): Promise<{ url: string; received: Received[]; close(): Promise<void> }> {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      received.push({
        path: req.url ?? '',
        headers: req.headers,
        raw,
        json: JSON.parse(raw.toString('utf8')),
      });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"status":"accepted"}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received,
    close() {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

async function waitFor(predicate: () => boolean, what: string): Promise<void> {
  const until = Date.now() + 10_000;
  while (!predicate()) {
    if (Date.now() > until) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

let receiver: Awaited<ReturnType<typeof recorder>>;
let sim: Simulator | undefined;
beforeEach(async () => {
  receiver = await recorder();
});
afterEach(async () => {
  await sim?.close();
  sim = undefined;
  await receiver.close();
});

const quiet = { out: () => undefined };

it("send-test-event: every event carries the st_proposta the service sends (averbacao.aprovada is not 'aprovada', pagamento.falha is not 'falha')", async () => {
  for (const evento of CATALOGUE) {
    await sendTestEventCommand(
      evento,
      { url: `${receiver.url}/webhooks`, secret: SECRET, proposal: '555', requestId: 'req-1' },
      quiet,
    );
  }
  expect(receiver.received.map((r) => r.json.evento)).toEqual(CATALOGUE);
  for (const { json } of receiver.received) {
    expect([json.evento, json.dados.st_proposta]).toEqual([json.evento, ST_PROPOSTA[json.evento as Evento]]);
  }
  const byEvento = new Map(receiver.received.map((r) => [r.json.evento as string, r.json.dados]));
  expect(byEvento.get('averbacao.aprovada').st_proposta).not.toBe('aprovada');
  expect(byEvento.get('pagamento.falha').st_proposta).not.toBe('falha');
});

it('send-test-event: a delivery of interface §2.5, signed so that the receiver verifies it', async () => {
  await sendTestEventCommand(
    'averbacao.negada',
    {
      url: `${receiver.url}/webhooks`,
      secret: SECRET,
      proposal: '555',
      requestId: 'req-1',
      webhookId: 'wh-1',
    },
    quiet,
  );
  await sendTestEventCommand(
    'formalizacao.iniciada',
    { url: `${receiver.url}/webhooks`, secret: SECRET },
    quiet,
  );
  const [negada, iniciada] = receiver.received as [Received, Received];
  expect(verifySignature(negada.raw, negada.headers['x-service-signature'], [SECRET])).toEqual({
    ok: true,
    secretIndex: 0,
  });
  expect(negada.json).toEqual({
    evento: 'averbacao.negada',
    timestamp: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}-03:00$/),
    dados: {
      nu_proposta: 555,
      nu_cpf: '52998224725',
      st_proposta: 'averbacao_negada',
      vl_emprestimo: 15000.5,
      no_conveniada: 'Empresa Exemplo Ltda',
      uuid: expect.stringMatching(UUID),
      requestId: 'req-1', // averbacao.* events name their registration
    },
    metadata: { tentativa: 1, webhook_id: 'wh-1' },
  });
  // Outside the averbação stage there is no registration to name; the default proposal is 100001.
  expect(iniciada.json.dados).not.toHaveProperty('requestId');
  expect(iniciada.json.dados.nu_proposta).toBe(100001);
  expect(iniciada.json.metadata.webhook_id).toMatch(/^wh_test_/);
});

it('send-test-event registry: the registry result at <url>/registry, signed', async () => {
  await sendTestEventCommand(
    'registry',
    { url: `${receiver.url}/webhooks`, secret: SECRET, requestId: 'req-2', status: 'error', proposal: '777' },
    quiet,
  );
  const [hook] = receiver.received as [Received];
  expect(hook.path).toBe('/webhooks/registry');
  expect(verifySignature(hook.raw, hook.headers['x-service-signature'], [SECRET]).ok).toBe(true);
  expect(hook.json).toEqual({
    requestId: 'req-2',
    correlationId: expect.stringMatching(UUID),
    status: 'error',
    nu_proposta: 777,
    metadata: { tentativa: 1, webhook_id: expect.stringMatching(/^wh_test_/) },
  });
});

it('the simulator delivers every catalogue event with the same st_proposta as send-test-event', async () => {
  const s = await startSimulator({ logger: createLogger('silent'), analysisDelayMs: 5 });
  sim = s;
  const token = s.issueToken();
  const post = (path: string, body: unknown) =>
    fetch(`${s.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify(body),
    });
  await post('/api/v1/webhooks', { url: `${receiver.url}/webhooks`, eventos: CATALOGUE, secret: SECRET });
  const created = await post('/api/v1/propostas', {
    nu_cpf: '52998224725',
    nu_cnpj_conveniada: '11222333000181',
    vl_emprestimo: 15000.5,
    qt_parcela: 24,
    dados_bancarios: { pix: 'cliente@example.com' },
  });
  const { nu_proposta: nu } = (await created.json()) as { nu_proposta: number };
  await waitFor(() => receiver.received.length === 2, 'proposta.criada and the analysis result');
  // Every other event, as is, through the control API (the service's order does not matter here).
  for (const evento of CATALOGUE.slice(2)) await s.sendEvent(nu, evento);
  await waitFor(() => receiver.received.length === CATALOGUE.length, 'every catalogue event');
  expect(receiver.received.map((r) => r.json.evento)).toEqual(CATALOGUE);
  for (const { json } of receiver.received) {
    expect([json.evento, json.dados.st_proposta]).toEqual([json.evento, ST_PROPOSTA[json.evento as Evento]]);
  }
});
