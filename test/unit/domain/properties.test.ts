import { isUtf8 } from 'node:buffer';
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { classifyDelivery, type Route, sha256Hex } from '../../../src/domain/delivery';
import { normalizeAmount, normalizeCnpj, normalizeCpf, normalizeDados } from '../../../src/domain/normalize';
import { parseSignatureHeader, sign, verifySignature } from '../../../src/domain/signature';

/**
 * Properties of signature verification and payload normalisation (issue 6, item 2): no input makes
 * them throw, verification never accepts a body not signed with a configured secret, and the
 * classification answers contract §4 for any bytes.
 */

// ---------------------------------------------------------------------------------------------
// Generators

/** Any string, lone surrogates and control characters included. */
const anyString = fc.string({ unit: 'binary', maxLength: 80 });
const secret = fc.oneof(anyString, fc.string({ minLength: 1, maxLength: 200 }));
const bytes = fc.uint8Array({ maxLength: 600 });
const hexDigits = (min: number, max: number) =>
  fc
    .array(fc.constantFrom(...'0123456789abcdefABCDEF'), { minLength: min, maxLength: max })
    .map((a) => a.join(''));
const whitespace = fc
  .array(fc.constantFrom(' ', '\t', '\n', '\r', '\u00a0', '\ufeff', '\u2028', '\u3000', '\v'), {
    maxLength: 3,
  })
  .map((a) => a.join(''));

/** Header values close to valid ones, and everything else. */
const headerValue = fc.oneof(
  anyString,
  fc
    .tuple(
      whitespace,
      fc.constantFrom('sha256=', 'SHA256=', 'sha256 =', 'sha1=', 'sha256:', '', 'sha256=='),
      hexDigits(60, 68),
      fc.constantFrom('', 'g', '\u0000', ' x', ','),
      whitespace,
    )
    .map((parts) => parts.join('')),
  fc.tuple(whitespace, hexDigits(64, 64), whitespace).map(([a, h, b]) => `${a}sha256=${h}${b}`),
);
const header = fc.oneof(fc.constant(undefined), headerValue, fc.array(headerValue, { maxLength: 3 }));

/**
 * The key HMAC really uses: the secret's UTF-8 bytes (hashed when longer than the 64-byte block),
 * zero-padded to the block. Two secrets with the same block (`'k'` and `'k\0'`, two different lone
 * surrogates) sign identically: that is HMAC, not a flaw of the receiver, so "a secret not in the set"
 * means one whose block differs from every configured one.
 */
function hmacBlock(s: string): string {
  let key = Buffer.from(s, 'utf8');
  if (key.length > 64) key = createHash('sha256').update(key).digest();
  return Buffer.concat([key, Buffer.alloc(64 - key.length)]).toString('hex');
}

/** Configured secrets (1–4, distinct as HMAC keys). */
const secretSet = fc.uniqueArray(secret, { minLength: 1, maxLength: 4, selector: hmacBlock });

/** Keys the classifier reads, the ones that could trip a naive reader, and any other. */
const key = fc.oneof(
  fc.constantFrom(
    'evento',
    'dados',
    'metadata',
    'webhook_id',
    'tentativa',
    'requestId',
    'status',
    'nu_proposta',
    '__proto__',
    'constructor',
    'prototype',
    'toString',
    'hasOwnProperty',
  ),
  fc.string({ maxLength: 12 }),
);

/** A JSON value of the kind a field could hold. */
const fieldValue = fc.oneof(
  fc.constantFrom('proposta.criada', 'proposta.aprovada', 'evento.novo', 'completed', 'r-1', '', '  ', '42'),
  fc.jsonValue({ maxDepth: 2 }),
  fc.integer(),
  fc.double(),
);

/** JSON object text written key by key, so `__proto__` stays an own key, and duplicates stay duplicates. */
const objectText: fc.Arbitrary<string> = fc.letrec<{ obj: string; value: string }>((tie) => ({
  obj: fc
    .array(fc.tuple(key, tie('value')), { maxLength: 6 })
    .map((entries) => `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`),
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fieldValue.map((v) => JSON.stringify(v)),
    tie('obj'),
  ),
})).obj;

/** Writes `{"k":v,…}` from (key, JSON text) pairs, keeping the order and any duplicates. */
const toObjectText = (entries: readonly (readonly [string, string | null])[]) =>
  `{${entries
    .filter((e): e is [string, string] => e[1] !== null)
    .map(([k, v]) => `${JSON.stringify(k)}:${v}`)
    .join(',')}}`;

const maybe = (arb: fc.Arbitrary<unknown>) =>
  fc.option(
    arb.map((v) => JSON.stringify(v)),
    { freq: 3 },
  );

/** Something close to a delivery or a registry result, each field present or not, right type or not. */
const deliveryText: fc.Arbitrary<string> = fc
  .record({
    evento: maybe(
      fc.oneof(fc.constantFrom('proposta.criada', 'averbacao.aprovada', 'evento.novo', ' '), fieldValue),
    ),
    requestId: maybe(fc.oneof(fc.constantFrom('r-1', 'r-2', ''), fc.integer(), fieldValue)),
    status: maybe(fc.oneof(fc.constantFrom('completed', 'error', ''), fieldValue)),
    dados: fc.option(
      fc.oneof(
        fc
          .record({
            requestId: maybe(fc.oneof(fc.constantFrom('r-3', ' '), fc.integer())),
            status: maybe(fc.constantFrom('queued', 'processing', '')),
            nu_proposta: maybe(fc.oneof(fc.integer(), fc.constantFrom('123', ' 7 ', 'x'), fc.double())),
          })
          .map((d) => toObjectText(Object.entries(d))),
        fieldValue.map((v) => JSON.stringify(v)),
      ),
      { freq: 3 },
    ),
    metadata: fc.option(
      fc
        .record({
          webhook_id: maybe(
            fc.oneof(fc.constantFrom('wh_1', '', '  '), fc.integer(), fc.double(), fieldValue),
          ),
          tentativa: maybe(fc.oneof(fc.nat(5), fc.constantFrom('2', '-1', 'x'))),
        })
        .map((m) => toObjectText(Object.entries(m))),
      { freq: 3 },
    ),
    extra: fc.array(
      fc.tuple(
        key,
        fieldValue.map((v) => JSON.stringify(v)),
      ),
      { maxLength: 3 },
    ),
    extraFirst: fc.boolean(),
  })
  .map(({ extra, extraFirst, ...fields }) => {
    const main = Object.entries(fields);
    return toObjectText(extraFirst ? [...extra, ...main] : [...main, ...extra]);
  });

/** Bodies: arbitrary bytes, any JSON value, anything serialisable, and shaped objects; maybe with a BOM. */
const body = fc
  .tuple(
    fc.boolean(),
    fc.oneof(
      bytes,
      fc.jsonValue().map((v) => JSON.stringify(v)),
      fc.anything({ maxDepth: 3 }).map((v) => JSON.stringify(v) ?? 'null'),
      objectText,
      { arbitrary: deliveryText, weight: 5 },
      deliveryText.map((t) => t.replace(/[{}]/, '')), // broken JSON
    ),
  )
  .map(([bom, b]) => {
    const raw = typeof b === 'string' ? Buffer.from(b, 'utf8') : Buffer.from(b);
    return bom ? Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), raw]) : raw;
  });
const route = fc.constantFrom<Route>('events', 'registry');

// ---------------------------------------------------------------------------------------------
// Oracle for contract §4, written from the table rather than from the implementation

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const field = (o: unknown, k: string): unknown => (isObj(o) && Object.hasOwn(o, k) ? o[k] : undefined);
/** A value usable as an identifier: a non-blank string or a finite number. */
const present = (v: unknown) =>
  (typeof v === 'string' && v.trim() !== '') || (typeof v === 'number' && Number.isFinite(v));

function parsedObject(raw: Buffer): Obj | null {
  if (!isUtf8(raw)) return null;
  let text = raw.toString('utf8');
  if (text.startsWith('\ufeff')) text = text.slice(1);
  try {
    const v: unknown = JSON.parse(text);
    return isObj(v) ? v : null;
  } catch {
    return null;
  }
}

/** Quarantined exactly when not a JSON object with a string `evento`, nor a registry result. */
function expectedInvalid(raw: Buffer, r: Route): boolean {
  const obj = parsedObject(raw);
  if (obj === null) return true;
  const evento = field(obj, 'evento');
  if (typeof evento === 'string' && evento.trim() !== '') return false;
  const dados = field(obj, 'dados');
  const requestId = present(field(obj, 'requestId')) || present(field(dados, 'requestId'));
  const status = present(field(obj, 'status')) || present(field(dados, 'status'));
  return !(requestId && (r === 'registry' || status));
}

/**
 * The registry result the rule sees in a body, or null: `requestId` (top level first, then under
 * `dados`) as text, its `status` likewise; on /webhooks only without a usable `evento` and with a
 * status, on /webhooks/registry whenever there is a requestId.
 */
function expectedRegistry(raw: Buffer, r: Route): { requestId: string; status: string | null } | null {
  const obj = parsedObject(raw);
  if (obj === null) return null;
  const asText = (v: unknown): string | null => (present(v) ? String(v) : null);
  const dados = field(obj, 'dados');
  const requestId = asText(field(obj, 'requestId')) ?? asText(field(dados, 'requestId'));
  const status = asText(field(obj, 'status')) ?? asText(field(dados, 'status'));
  const evento = field(obj, 'evento');
  const isEvent = typeof evento === 'string' && evento.trim() !== '';
  if (requestId === null) return null;
  return r === 'registry' || (!isEvent && status !== null) ? { requestId, status } : null;
}

// ---------------------------------------------------------------------------------------------

describe('verifySignature', () => {
  it('never throws, whatever the body, header and secrets', () => {
    fc.assert(
      fc.property(bytes, header, fc.array(secret, { maxLength: 4 }), (b, h, secrets) => {
        const r = verifySignature(b, h, secrets);
        expect(typeof r.ok).toBe('boolean');
        if (r.ok) expect(r.secretIndex).toBeGreaterThanOrEqual(0);
        else expect(['missing', 'malformed', 'mismatch']).toContain(r.reason);
      }),
      { numRuns: 500 },
    );
  });

  it('never accepts a signature made with a secret that is not configured', () => {
    fc.assert(
      fc.property(bytes, secretSet, secret, (b, secrets, other) => {
        fc.pre(!secrets.some((s) => hmacBlock(s) === hmacBlock(other)));
        expect(verifySignature(b, sign(other, b), secrets)).toEqual({ ok: false, reason: 'mismatch' });
      }),
      { numRuns: 300 },
    );
  });

  it('never accepts a configured secret’s signature of a different body', () => {
    fc.assert(
      fc.property(bytes, bytes, secretSet, fc.nat(), (b, other, secrets, i) => {
        fc.pre(Buffer.compare(Buffer.from(b), Buffer.from(other)) !== 0);
        const s = secrets[i % secrets.length] as string;
        expect(verifySignature(b, sign(s, other), secrets)).toEqual({ ok: false, reason: 'mismatch' });
      }),
      { numRuns: 300 },
    );
  });

  it('accepts a signature made with any configured secret (rotation), in any hex case, trimmed', () => {
    fc.assert(
      fc.property(bytes, secretSet, fc.nat(), fc.boolean(), whitespace, (b, secrets, i, upper, pad) => {
        const index = i % secrets.length;
        const signature = sign(secrets[index] as string, b);
        const sent = upper ? `sha256=${signature.slice(7).toUpperCase()}` : signature;
        expect(verifySignature(b, `${pad}${sent}${pad}`, secrets)).toEqual({ ok: true, secretIndex: index });
      }),
      { numRuns: 300 },
    );
  });
});

describe('parseSignatureHeader', () => {
  it('accepts exactly /^sha256=[0-9a-fA-F]{64}$/ after trim, and gives its 32-byte digest', () => {
    fc.assert(
      fc.property(headerValue, (h) => {
        const r = parseSignatureHeader(h);
        const match = /^sha256=([0-9a-fA-F]{64})$/.exec(h.trim());
        expect(r.ok).toBe(match !== null);
        if (r.ok) expect(r.digest.equals(Buffer.from(match?.[1] as string, 'hex'))).toBe(true);
        else expect(r.reason).toBe(h === '' ? 'missing' : 'malformed');
      }),
      { numRuns: 1_000 },
    );
  });

  it('refuses a header sent more than once, and calls an absent one missing', () => {
    fc.assert(
      fc.property(fc.array(headerValue, { maxLength: 3 }), (hs) => {
        expect(parseSignatureHeader(hs)).toEqual({ ok: false, reason: 'malformed' });
      }),
    );
    expect(parseSignatureHeader(undefined)).toEqual({ ok: false, reason: 'missing' });
  });
});

describe('classifyDelivery', () => {
  it('never throws and always gives a dedup key; invalid exactly when contract §4 says so; the registry dedup key follows the rule, not the classifier (regression)', () => {
    fc.assert(
      fc.property(body, route, (raw, r) => {
        const c = classifyDelivery(raw, r);
        expect(c.status === 'invalid').toBe(expectedInvalid(raw, r));
        expect(typeof c.dedupKey).toBe('string');
        expect(c.dedupKey.length).toBeGreaterThan(0);
        expect(c.text === null).toBe(!isUtf8(raw));
        if (c.text !== null) expect(Buffer.from(c.text, 'utf8').equals(raw)).toBe(true);

        // The dedup key: webhook_id when present, else registry:<requestId>:<status>, else the body's hash.
        // Checked against the rule (expectedRegistry), not against the classifier's own fields.
        const webhookId = field(field(parsedObject(raw), 'metadata'), 'webhook_id');
        const registry = expectedRegistry(raw, r);
        expect(c.kind === 'registry').toBe(registry !== null);
        if (present(webhookId)) expect(c.dedupKey).toBe(String(webhookId));
        else if (registry !== null)
          expect(c.dedupKey).toBe(`registry:${registry.requestId}:${registry.status ?? ''}`);
        else expect(c.dedupKey).toBe(`sha256:${sha256Hex(raw)}`);
        if (c.status === 'invalid') expect(c.invalidReason).toEqual(expect.any(String));
        else expect(c.invalidReason).toBeNull();
        if (c.kind === 'registry') expect(c.requestId).toEqual(expect.any(String));
        if (c.kind === 'event' && c.status !== 'invalid') expect(c.evento).toEqual(expect.any(String));
      }),
      { numRuns: 1_500 },
    );
  });

  it('reads only own keys: `__proto__` and `constructor` never supply a field', () => {
    fc.assert(
      fc.property(objectText, route, (inner, r) => {
        const raw = Buffer.from(
          `{"__proto__":{"evento":"proposta.criada","requestId":"r","status":"completed"},"x":${inner}}`,
        );
        const c = classifyDelivery(raw, r);
        expect(c).toMatchObject({ status: 'invalid', evento: null, requestId: null });
      }),
    );
  });
});

describe('normalisation', () => {
  const anything = fc.anything({
    withBigInt: true,
    withBoxedValues: true,
    withDate: true,
    withMap: true,
    withSet: true,
    withNullPrototype: true,
    withObjectString: true,
    withTypedArray: true,
    withSparseArray: true,
  });
  const dadosLike = fc.record(
    {
      nu_proposta: anything,
      uuid: anything,
      nu_cpf: fc.oneof(anything, fc.integer(), fc.stringMatching(/^[\d.\- ]{0,16}$/)),
      nu_cnpj_conveniada: fc.oneof(anything, fc.stringMatching(/^[\dA-Za-z./\- ]{0,20}$/)),
      vl_emprestimo: fc.oneof(anything, fc.double(), fc.stringMatching(/^-?\d{0,6}(\.\d{0,3})?$/)),
      qt_parcela: anything,
      no_conveniada: anything,
      st_proposta: anything,
      requestId: anything,
    },
    { requiredKeys: [] },
  );

  it('normalizeDados never throws and gives a ProposalData with the documented types', () => {
    fc.assert(
      fc.property(fc.oneof(anything, dadosLike), (dados) => {
        const p = normalizeDados(dados);
        expect(Object.keys(p).sort()).toEqual(
          [
            'no_conveniada',
            'nu_cnpj_conveniada',
            'nu_cpf',
            'nu_proposta',
            'qt_parcela',
            'requestId',
            'st_proposta',
            'uuid',
            'vl_emprestimo',
          ].sort(),
        );
        expect(p.nu_cpf === null || /^\d{11}$/.test(p.nu_cpf)).toBe(true);
        expect(p.vl_emprestimo === null || Number.isFinite(p.vl_emprestimo)).toBe(true);
        expect(p.qt_parcela === null || Number.isSafeInteger(p.qt_parcela)).toBe(true);
        for (const k of ['uuid', 'no_conveniada', 'st_proposta', 'requestId'] as const)
          expect(p[k] === null || typeof p[k] === 'string').toBe(true);
      }),
      { numRuns: 500 },
    );
  });

  it('normalizeCpf: never throws; null or 11 digits', () => {
    fc.assert(
      fc.property(
        fc.oneof(anything, fc.integer(), fc.double(), fc.stringMatching(/^[\d.\- ]{0,16}$/)),
        (v) => {
          const cpf = normalizeCpf(v);
          expect(cpf === null || /^\d{11}$/.test(cpf)).toBe(true);
        },
      ),
      { numRuns: 500 },
    );
  });

  it('normalizeCnpj: never throws; null or 12 letters/digits then 2 digits', () => {
    fc.assert(
      fc.property(fc.oneof(anything, fc.integer(), fc.stringMatching(/^[\dA-Za-z./\- ]{0,20}$/)), (v) => {
        const cnpj = normalizeCnpj(v);
        expect(cnpj === null || /^[0-9A-Z]{12}\d{2}$/.test(cnpj)).toBe(true);
      }),
      { numRuns: 500 },
    );
  });

  it('normalizeAmount: never throws; null or a finite number', () => {
    fc.assert(
      fc.property(fc.oneof(anything, fc.double(), fc.stringMatching(/^ ?-?\d{0,6}(\.\d{0,3})? ?$/)), (v) => {
        const amount = normalizeAmount(v);
        expect(amount === null || Number.isFinite(amount)).toBe(true);
      }),
      { numRuns: 500 },
    );
  });
});
