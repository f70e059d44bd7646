import type { Pool } from 'pg';
import { count, sendSigned, waitFor } from './cluster-db';
import { delivery, postRaw } from './payloads';
import type { TestReceiver } from './receiver';

/**
 * One story of deliveries played the same way into a receiver on SQLite alone and into a cluster
 * replica, so that tests compare what each mode shows of the same log (the admin API, the console).
 */

export interface Step {
  body: unknown;
  path?: string;
  /** The webhook's answer: `accepted` unless said (a wrong signature: 401). */
  answer?: 'accepted' | 'duplicate' | 'quarantined' | 401;
}

/**
 * Two proposals (one with an averbação and its registry answer, a duplicate), an unknown
 * `evento`, a text proposal number, a body that is not UTF-8, and a wrong signature.
 */
export function scenario(): Step[] {
  const ev = (evento: string, nu: number | string, dados: Record<string, unknown> = {}) =>
    delivery(evento, { dados: { nu_proposta: nu, ...dados } });
  const preAprovada = ev('proposta.pre_aprovada', 9101, { vl_emprestimo: 14000.25 });
  return [
    { body: ev('proposta.criada', 9101) },
    { body: preAprovada },
    { body: ev('proposta.aprovada', 9101) },
    { body: ev('averbacao.solicitada', 9101, { requestId: 'req-9101', correlationId: 'corr-9101' }) },
    { body: preAprovada, answer: 'duplicate' },
    {
      body: { requestId: 'req-9101', status: 'completed', correlationId: 'corr-9101' },
      path: '/webhooks/registry',
    },
    { body: ev('proposta.criada', 9102) },
    { body: ev('proposta.negada', 9102) },
    // An `evento` the catalogue does not know: stored `ignored`.
    { body: ev('proposta.renegociada', 9103) },
    // A proposal number that is text.
    { body: ev('proposta.criada', 'ADE-77') },
    // Not UTF-8: quarantined, its bytes kept.
    { body: Buffer.from([0x7b, 0xff, 0x7d]), answer: 'quarantined' },
    { body: ev('proposta.criada', 9104), answer: 401 },
  ];
}

const sqliteCount = (r: TestReceiver, sql: string): number =>
  (r.store.db.prepare(sql).get() as { n: number }).n;

const UNFINISHED = "SELECT count(*) AS n FROM events WHERE status IN ('pending', 'failed')";

/**
 * Waits until the receiver's log (its file, or PostgreSQL through `pool` for a replica) holds
 * `events` events, all final, and `deliveries` deliveries.
 */
export async function settled(
  r: TestReceiver,
  pool: Pool,
  events: number,
  deliveries: number,
): Promise<void> {
  const figures = async () =>
    !r.clustered
      ? [
          sqliteCount(r, 'SELECT count(*) AS n FROM events'),
          sqliteCount(r, UNFINISHED),
          sqliteCount(r, 'SELECT count(*) AS n FROM deliveries'),
        ]
      : [
          await count(pool, 'SELECT count(*) AS n FROM events'),
          await count(pool, UNFINISHED),
          await count(pool, 'SELECT count(*) AS n FROM deliveries'),
        ];
  await waitFor(async () => {
    const [e, unfinished, d] = await figures();
    return e === events && unfinished === 0 && d === deliveries;
  }, `${events} events processed and ${deliveries} deliveries in the log`);
}

/** Sends each step and waits until the receiver's log has processed it (one order in both modes). */
export async function play(r: TestReceiver, pool: Pool, steps: readonly Step[]): Promise<void> {
  let events = 0;
  for (const [i, step] of steps.entries()) {
    const answer = step.answer ?? 'accepted';
    if (answer === 401) {
      const raw = JSON.stringify(step.body);
      const res = await postRaw(`${r.url}/webhooks`, raw, {
        'x-service-signature': `sha256=${'0'.repeat(64)}`,
      });
      if (res.status !== 401) throw new Error(`step ${i}: answered ${res.status}, not 401`);
    } else {
      const res = await sendSigned(r.url, step.body, step.path);
      if (res.status !== 200 || res.body.status !== answer)
        throw new Error(`step ${i}: answered ${res.status} ${String(res.body.status)}, not 200 ${answer}`);
      if (answer !== 'duplicate') events += 1;
    }
    await settled(r, pool, events, i + 1);
  }
}
