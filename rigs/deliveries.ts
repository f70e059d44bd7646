import { createHmac } from 'node:crypto';
import { Agent, request } from 'node:http';
import { EVENTOS, type Evento } from '../src/domain/catalogue';
import { EVENT_EFFECTS, HAPPY_PATH } from '../src/domain/lifecycle';
import { HOST } from './harness';

/**
 * The signed life-cycle deliveries the bench's loads send (and the crash tests'), and the open-loop
 * sender. Bodies are signed here with node:crypto, independently of the code under test.
 */

export const signatureOf = (secret: string, body: Buffer): string =>
  `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;

/** The proposal flow without its refusals: every event moves its proposal (a transition each). */
export const FLOW = EVENTOS.filter(
  (e) => !e.endsWith('negada') && e !== 'proposta.cancelada' && e !== 'pagamento.falha',
);

/** A secret no receiver of the bench is configured with (the bad-signature deliveries). */
export const WRONG_SECRET = 'not-the-configured-secret-987';

/**
 * Five-event windows of the life cycle (contract §6): the happy start, a denied averbação, a
 * proposal first seen mid-way, one that reaches payment, a payment that failed and was retried.
 */
export const PATHS: readonly { weight: number; eventos: readonly Evento[] }[] = [
  { weight: 50, eventos: HAPPY_PATH.slice(0, 5) },
  { weight: 15, eventos: [...HAPPY_PATH.slice(0, 4), 'averbacao.negada'] },
  { weight: 15, eventos: HAPPY_PATH.slice(2, 7) },
  { weight: 10, eventos: HAPPY_PATH.slice(4, 9) },
  { weight: 10, eventos: [...HAPPY_PATH.slice(5, 8), 'pagamento.falha', 'pagamento.realizado'] },
];

const CONVENIADAS = ['Empresa Exemplo Ltda', 'Metalúrgica São João S.A.', 'Comércio Açaí & Cia ME'];
// Valid CPFs (check digits), test values only.
export const CPFS = ['12345678909', '11144477735', '52998224725', '01234567890'];

/** What a proposal's deliveries carry besides the event. */
export interface ProposalData {
  nu: number;
  uuid: string;
  cpf: string;
  amount: number;
  conveniada: string;
}

/** A proposal of number `nu` with seeded data, and a path of PATHS chosen by weight. */
export function seededProposal(nu: number, rng: () => number): ProposalData & { eventos: readonly Evento[] } {
  const pick = <T>(list: readonly T[]): T => list[Math.floor(rng() * list.length)] as T;
  let w = rng() * PATHS.reduce((s, p) => s + p.weight, 0);
  const path = PATHS.find((p) => (w -= p.weight) < 0) ?? (PATHS[0] as (typeof PATHS)[number]);
  const hex = () =>
    Math.floor(rng() * 0x100000000)
      .toString(16)
      .padStart(8, '0');
  const u = `${hex()}${hex()}${hex()}${hex()}`;
  return {
    nu,
    uuid: `${u.slice(0, 8)}-${u.slice(8, 12)}-4${u.slice(13, 16)}-a${u.slice(17, 20)}-${u.slice(20, 32)}`,
    cpf: pick(CPFS),
    amount: Math.round((1000 + rng() * 99_000) * 100) / 100,
    conveniada: pick(CONVENIADAS),
    eventos: path.eventos,
  };
}

/** The body of step `step` of a proposal (its timestamp an hour per step after the proposal's start). */
export function lifeCycleBody(
  p: ProposalData,
  evento: Evento,
  step: number,
  webhookId: string,
  tentativa: number,
): Buffer {
  const at = new Date(Date.UTC(2026, 10, 21, 13, 0, 0) + (p.nu % 100_000) * 1000 + step * 3_600_000);
  return Buffer.from(
    JSON.stringify({
      evento,
      timestamp: at.toISOString().replace('Z', '-00:00'),
      dados: {
        nu_proposta: p.nu,
        uuid: p.uuid,
        nu_cpf: p.cpf,
        st_proposta: EVENT_EFFECTS[evento].status,
        vl_emprestimo: p.amount,
        no_conveniada: p.conveniada,
      },
      metadata: { tentativa, webhook_id: webhookId },
    }),
  );
}

/** A minimal signed delivery of `evento` for proposal `nu` (the bench's fixed-rate runs). */
export function plainDelivery(
  id: string,
  nu: number,
  evento: string,
  secret: string,
): { id: string; body: Buffer; signature: string } {
  const body = Buffer.from(
    JSON.stringify({
      evento,
      timestamp: '2026-11-21T10:00:00-03:00',
      dados: {
        nu_proposta: nu,
        nu_cpf: '52998224725',
        st_proposta: evento.split('.')[1],
        vl_emprestimo: 15000.5,
        no_conveniada: 'Empresa Exemplo Ltda',
      },
      metadata: { tentativa: 1, webhook_id: id },
    }),
  );
  return { id, body, signature: signatureOf(secret, body) };
}

/**
 * Delivery i of `flow` with `atOnce` proposals interleaved: proposal nuBase + ⌊i / group⌋·atOnce +
 * i mod atOnce, at step ⌊(i mod group) / atOnce⌋ (group = flow × atOnce).
 */
export function interleavedDelivery(
  i: number,
  o: { flow: readonly string[]; atOnce: number; nuBase: number; idPrefix: string; secret: string },
): { id: string; body: Buffer; signature: string } {
  const group = o.flow.length * o.atOnce;
  const nu = o.nuBase + Math.floor(i / group) * o.atOnce + (i % o.atOnce);
  const evento = o.flow[Math.floor((i % group) / o.atOnce)] as string;
  return plainDelivery(`${o.idPrefix}${String(i).padStart(6, '0')}`, nu, evento, o.secret);
}

/**
 * Open loop: request i leaves at t0 + i/rate, to ports[i mod ports], whatever the earlier ones are
 * doing (a closed loop would slow down with the receiver and hide its queueing). Resolves with the
 * sender's largest lag behind its schedule once every request answered (status 0: no answer).
 */
export async function sendOpenLoop(
  spec: { ports: readonly number[]; rate: number },
  items: readonly { body: Buffer; signature: string }[],
  onAnswer: (i: number, status: number, sentAt: number, answeredAt: number) => void,
): Promise<number> {
  const agent = new Agent({ keepAlive: true, maxSockets: 256 });
  const period = 1000 / spec.rate;
  const t0 = performance.now() + 20;
  let next = 0;
  let open = 0;
  let maxLagMs = 0;
  let allAnswered: () => void = () => undefined;
  const answered = new Promise<void>((done) => (allAnswered = done));
  const send = (i: number) => {
    const item = items[i] as { body: Buffer; signature: string };
    const sentAt = performance.now();
    maxLagMs = Math.max(maxLagMs, sentAt - (t0 + i * period));
    open += 1;
    const finish = (status: number) => {
      onAnswer(i, status, sentAt, performance.now());
      open -= 1;
      if (open === 0 && next >= items.length) allAnswered();
    };
    const headers = {
      'content-type': 'application/json',
      'content-length': String(item.body.length),
      'x-service-signature': item.signature,
    };
    const port = spec.ports[i % spec.ports.length];
    const req = request({ host: HOST, port, path: '/webhooks', method: 'POST', agent, headers }, (res) => {
      res.resume();
      res.on('end', () => finish(res.statusCode ?? 0));
      res.on('error', () => finish(0));
    });
    req.on('error', () => finish(0));
    req.end(item.body);
  };
  await new Promise<void>((done) => {
    const tick = () => {
      while (next < items.length && t0 + next * period <= performance.now()) send(next++);
      if (next >= items.length) return done();
      setTimeout(tick, Math.max(0, t0 + next * period - performance.now()));
    };
    tick();
  });
  if (open > 0) await answered;
  agent.destroy();
  return maxLagMs;
}

/** A webhook's answer: its status, its body's `status` (or `error`), and its `event_id`. */
export interface WebhookAnswer {
  status: number;
  outcome: string;
  eventId: number | null;
}

/** POST /webhooks on loopback; null when there was no HTTP answer (refused, reset, or 15 s). */
export function postWebhook(
  agent: Agent,
  port: number,
  body: Buffer,
  signature: string | null,
): Promise<WebhookAnswer | null> {
  return new Promise((done) => {
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'content-length': String(body.length),
    };
    if (signature !== null) headers['x-service-signature'] = signature;
    let settled = false;
    const finish = (a: WebhookAnswer | null) => {
      if (settled) return;
      settled = true;
      done(a);
    };
    const req = request(
      { host: HOST, port, path: '/webhooks', method: 'POST', agent, headers, timeout: 15_000 },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          let outcome = '(not JSON)';
          let eventId: number | null = null;
          try {
            const parsed = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
            outcome = String(parsed.status ?? parsed.error ?? '');
            eventId = typeof parsed.event_id === 'number' ? parsed.event_id : null;
          } catch {
            // keep '(not JSON)'
          }
          finish({ status: res.statusCode ?? 0, outcome, eventId });
        });
        res.on('error', () => finish(null));
        res.on('aborted', () => finish(null));
      },
    );
    req.on('timeout', () => req.destroy(new Error('request timeout')));
    req.on('error', () => finish(null));
    req.end(body);
  });
}
