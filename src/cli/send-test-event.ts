import { randomUUID } from 'node:crypto';
import { UsageError } from '../domain/errors';
import {
  eventDados,
  eventPayload,
  EVENTOS,
  type Evento,
  EXAMPLE_PROPOSAL,
  isEvento,
  isoBrasilia,
  registryResult,
  signatureOf,
} from '../simulator';
import type { Output } from './log-commands';

/**
 * `send-test-event <evento> --url <url> --secret <secret>`: sign and POST one realistic delivery
 * (like `stripe trigger`), the partner's first check that its secret and route are right. `registry`
 * sends a registry result instead. Exits non-zero unless the answer is 200.
 *
 * What it sends is the service's side of the wire: the simulator's own example `dados` and its own
 * signing, never the receiver's rules, so that a test event looks like what the service sends.
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

/** `--proposal` as the service writes it (a number); other text goes as is, to try odd input. */
function proposalNumber(proposal: string | undefined): number | string {
  if (proposal === undefined) return EXAMPLE_PROPOSAL.nu_proposta;
  return /^\d+$/.test(proposal) ? Number(proposal) : proposal;
}

/** A delivery of interface §2.5 for `evento`, or a registry result (interface §4.4) for `registry`. */
export function sampleDelivery(
  evento: Evento | 'registry',
  o: SendTestEventOptions,
  now: Date,
): Record<string, unknown> {
  const metadata = { tentativa: 1, webhook_id: o.webhookId ?? `wh_test_${randomUUID()}` };
  const nu = proposalNumber(o.proposal);
  const requestId = o.requestId ?? randomUUID();
  if (evento === 'registry') {
    const result = registryResult({
      requestId,
      correlationId: randomUUID(),
      status: o.status ?? 'completed',
      nu_proposta: nu,
    });
    // The service's registry result has no metadata (its payload is "not shown", interface §6.2);
    // one is added so that `--webhook-id` can exercise the receiver's deduplication.
    return { ...result, metadata };
  }
  const dados = eventDados(evento, { ...EXAMPLE_PROPOSAL, nu_proposta: nu }, requestId);
  return eventPayload(evento, isoBrasilia(now), dados, metadata);
}

export async function sendTestEventCommand(
  evento: string,
  o: SendTestEventOptions,
  io: Output,
): Promise<void> {
  if (evento !== 'registry' && !isEvento(evento))
    throw new UsageError(`unknown evento "${evento}" (one of: ${EVENTOS.join(', ')}, or registry)`);
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
  const sent = sampleDelivery(evento, o, new Date());
  const body = Buffer.from(JSON.stringify(sent));
  const header = o.header ?? 'X-Service-Signature';
  let res: Response;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', [header]: signatureOf(o.secret, body) },
      body,
      signal: AbortSignal.timeout(10_000),
    });
  } catch (err) {
    throw new UsageError(`could not reach ${url.href}: ${(err as Error).cause ?? (err as Error).message}`);
  }
  const text = await res.text();
  if (o.json) io.out(JSON.stringify({ url: url.href, status: res.status, answer: text, sent }));
  else io.out(`POST ${url.href} → ${res.status} ${text}`);
  if (res.status !== 200) {
    const hint = res.status === 401 ? ' (the secret or SIGNATURE_HEADER does not match the receiver)' : '';
    throw new DeliveryRefused(`the receiver answered ${res.status}${hint}`);
  }
}

class DeliveryRefused extends Error {}
