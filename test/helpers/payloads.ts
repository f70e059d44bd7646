import { sign } from '../../src/domain/signature';

export const SECRET = 'test-secret-0123456789';

/**
 * The order the service sends a proposal's events in on its happy path (interface §6.2); written out
 * here, not taken from the receiver's life-cycle table, so tests do not check the code against itself.
 */
export const HAPPY_PATH = [
  'proposta.criada',
  'proposta.pre_aprovada',
  'proposta.aprovada',
  'averbacao.solicitada',
  'averbacao.aprovada',
  'formalizacao.iniciada',
  'formalizacao.concluida',
  'efetivacao.concluida',
  'pagamento.realizado',
] as const;

let counter = 0;

/** A realistic delivery of interface §2.5, with a fresh webhook_id unless one is given. */
export function delivery(
  evento = 'proposta.aprovada',
  overrides: {
    nu_proposta?: number;
    webhook_id?: string;
    tentativa?: number;
    dados?: Record<string, unknown>;
  } = {},
): Record<string, unknown> {
  counter += 1;
  return {
    evento,
    timestamp: '2026-11-21T10:00:00-03:00',
    dados: {
      nu_proposta: overrides.nu_proposta ?? 900000 + counter,
      nu_cpf: '12345678909',
      st_proposta: 'aprovada',
      vl_emprestimo: 15000.5,
      no_conveniada: 'Empresa Exemplo Ltda',
      ...overrides.dados,
    },
    metadata: {
      tentativa: overrides.tentativa ?? 1,
      webhook_id: overrides.webhook_id ?? `wh_test_${process.pid}_${counter}`,
    },
  };
}

/** Body bytes and the signature header value for them. */
export function signed(body: unknown, secret = SECRET): { raw: Buffer; signature: string } {
  const raw = Buffer.isBuffer(body)
    ? body
    : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
  return { raw, signature: sign(secret, raw) };
}

export interface PostResult {
  status: number;
  headers: Record<string, string>;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON answers are read loosely in tests
  body: any;
}

/** POSTs raw bytes over real HTTP (fetch), with exactly the headers given. */
export async function postRaw(
  url: string,
  raw: Uint8Array | string,
  headers: Record<string, string> = {},
): Promise<PostResult> {
  const res = await fetch(url, { method: 'POST', headers, body: raw });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: keep the text
  }
  return { status: res.status, headers: Object.fromEntries(res.headers), body };
}
