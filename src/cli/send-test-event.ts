import { randomUUID } from 'node:crypto';
import { EVENTOS, isKnownEvento } from '../domain/catalogue';
import { UsageError } from '../domain/errors';
import { sign } from '../domain/signature';
import type { Output } from './log-commands';

/**
 * `send-test-event <evento> --url <url> --secret <secret>`: sign and POST one realistic delivery
 * (like `stripe trigger`), the partner's first check that its secret and route are right. `registry`
 * sends a registry result instead. Exits non-zero unless the answer is 200.
 */

export interface SendTestEventOptions {
  url?: string;
  secret?: string;
  proposal?: string;
  requestId?: string;
  status?: string;
  header?: string;
  webhookId?: string;
  json?: boolean;
}

const SAMPLE = {
  nu_cpf: '52998224725',
  vl_emprestimo: 15000.5,
  no_conveniada: 'Empresa Exemplo Ltda',
};

const ST_PROPOSTA: Record<string, string> = {
  'proposta.criada': 'em_analise',
  'proposta.pre_aprovada': 'pre_aprovada',
  'proposta.aprovada': 'aprovada',
  'proposta.negada': 'negada',
  'proposta.cancelada': 'cancelada',
};

/** A delivery of seed §2.5 (or a registry result, whose shape the seed does not show). */
export function sampleDelivery(evento: string, o: SendTestEventOptions, now: Date): Record<string, unknown> {
  const webhookId = o.webhookId ?? `wh_test_${randomUUID()}`;
  const nu = o.proposal === undefined ? 100001 : /^\d+$/.test(o.proposal) ? Number(o.proposal) : o.proposal;
  if (evento === 'registry') {
    return {
      requestId: o.requestId ?? randomUUID(),
      correlationId: randomUUID(),
      status: o.status ?? 'completed',
      nu_proposta: nu,
      metadata: { tentativa: 1, webhook_id: webhookId },
    };
  }
  const dados: Record<string, unknown> = {
    nu_proposta: nu,
    ...SAMPLE,
    st_proposta: ST_PROPOSTA[evento] ?? evento.split('.')[1],
  };
  if (evento.startsWith('averbacao.')) dados.requestId = o.requestId ?? randomUUID();
  return {
    evento,
    timestamp: now.toISOString().replace('Z', '+00:00'),
    dados,
    metadata: { tentativa: 1, webhook_id: webhookId },
  };
}

export async function sendTestEventCommand(
  evento: string,
  o: SendTestEventOptions,
  io: Output,
): Promise<void> {
  if (evento !== 'registry' && !isKnownEvento(evento)) {
    throw new UsageError(`unknown evento "${evento}" (one of: ${EVENTOS.join(', ')}, or registry)`);
  }
  if (!o.url) throw new UsageError('send-test-event needs --url (e.g. http://127.0.0.1:3000/webhooks)');
  let url: URL;
  try {
    url = new URL(o.url);
  } catch {
    throw new UsageError(`--url is not a URL: ${o.url}`);
  }
  if (!o.secret)
    throw new UsageError('send-test-event needs --secret (the one the receiver has in WEBHOOK_SECRETS)');
  if (evento === 'registry' && !url.pathname.endsWith('/registry')) {
    url = new URL(`${url.pathname.replace(/\/$/, '')}/registry`, url);
  }
  const body = Buffer.from(JSON.stringify(sampleDelivery(evento, o, new Date())));
  const header = o.header ?? 'X-Service-Signature';
  let res: Response;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', [header]: sign(o.secret, body) },
      body,
      signal: AbortSignal.timeout(10_000),
    });
  } catch (err) {
    throw new UsageError(`could not reach ${url.href}: ${(err as Error).cause ?? (err as Error).message}`);
  }
  const text = await res.text();
  if (o.json)
    io.out(
      JSON.stringify({ url: url.href, status: res.status, answer: text, sent: JSON.parse(body.toString()) }),
    );
  else io.out(`POST ${url.href} → ${res.status} ${text}`);
  if (res.status !== 200) {
    const hint = res.status === 401 ? ' (the secret or SIGNATURE_HEADER does not match the receiver)' : '';
    throw new DeliveryRefused(`the receiver answered ${res.status}${hint}`);
  }
}

class DeliveryRefused extends Error {}
