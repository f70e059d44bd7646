import { classifyDelivery, sha256Hex } from '../../../src/domain/delivery';

const b = (v: unknown) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v));

const event = {
  evento: 'proposta.aprovada',
  timestamp: '2026-11-21T10:00:00-03:00',
  dados: {
    nu_proposta: 42,
    nu_cpf: '01234567890',
    st_proposta: 'aprovada',
    vl_emprestimo: 1000,
    no_conveniada: 'X',
  },
  metadata: { tentativa: 2, webhook_id: 'wh_42' },
};

describe('classifyDelivery', () => {
  it('reads a catalogue event', () => {
    expect(classifyDelivery(b(event), 'events')).toMatchObject({
      kind: 'event',
      status: 'pending',
      dedupKey: 'wh_42',
      webhookId: 'wh_42',
      evento: 'proposta.aprovada',
      nuProposta: 42,
      tentativa: 2,
      invalidReason: null,
    });
  });

  // One row per case of contract §4's table and the dedup-key rule.
  it.each([
    [
      'unknown evento → ignored',
      { ...event, evento: 'proposta.reativada' },
      'events',
      { kind: 'event', status: 'ignored', dedupKey: 'wh_42' },
    ],
    [
      'no webhook_id → sha256 of the body',
      { ...event, metadata: { tentativa: 1 } },
      'events',
      { status: 'pending', webhookId: null },
    ],
    [
      'numeric webhook_id → text',
      { ...event, metadata: { webhook_id: 7 } },
      'events',
      { dedupKey: '7', webhookId: '7' },
    ],
    [
      'nu_proposta as text digits → integer',
      { ...event, dados: { nu_proposta: '0042' } },
      'events',
      { nuProposta: 42 },
    ],
    [
      'nu_proposta not numeric → kept as text',
      { ...event, dados: { nu_proposta: 'P-9' } },
      'events',
      { nuProposta: 'P-9' },
    ],
    [
      'registry result on /webhooks',
      { requestId: 'r-1', status: 'completed' },
      'events',
      {
        kind: 'registry',
        status: 'pending',
        dedupKey: 'registry:r-1:completed',
        requestId: 'r-1',
        registryStatus: 'completed',
      },
    ],
    [
      'registry result under dados',
      { dados: { requestId: 'r-2', status: 'error' } },
      'registry',
      { kind: 'registry', dedupKey: 'registry:r-2:error', registryStatus: 'error' },
    ],
    [
      'registry result with webhook_id',
      { requestId: 'r-3', status: 'processing', metadata: { webhook_id: 'wh_r3' } },
      'registry',
      { kind: 'registry', dedupKey: 'wh_r3' },
    ],
    [
      'registry route, requestId without status',
      { requestId: 'r-4' },
      'registry',
      { kind: 'registry', dedupKey: 'registry:r-4:', registryStatus: null },
    ],
    [
      '/webhooks: requestId without status → quarantined',
      { requestId: 'r-5' },
      'events',
      { status: 'invalid' },
    ],
    [
      'registry route with an evento and a requestId → registry',
      { evento: 'averbacao.aprovada', requestId: 'r-6', status: 'completed' },
      'registry',
      { kind: 'registry', evento: 'averbacao.aprovada' },
    ],
    [
      '/webhooks: evento and requestId in dados → event that carries the requestId',
      { evento: 'averbacao.solicitada', dados: { nu_proposta: 1, requestId: 'r-7' } },
      'events',
      { kind: 'event', requestId: 'r-7' },
    ],
    [
      'registry route with only an evento → event',
      { ...event },
      'registry',
      { kind: 'event', status: 'pending' },
    ],
  ] as const)('%s', (_name, body, route, expected) => {
    expect(classifyDelivery(b(body), route)).toMatchObject(expected);
  });

  it.each([
    ['not JSON', 'hello', 'body is not JSON'],
    ['truncated JSON', '{"evento":"proposta.aprovada","dados":{', 'body is not JSON'],
    ['an array', '[1,2]', 'body is not a JSON object'],
    ['a string', '"x"', 'body is not a JSON object'],
    ['null', 'null', 'body is not a JSON object'],
    ['empty body', '', 'body is not JSON'],
    ['an object without evento or registry fields', '{"a":1}', 'neither an event'],
    ['evento that is not a string', '{"evento":12}', '`evento` is not a non-empty string'],
    ['empty evento', '{"evento":"  "}', '`evento` is not a non-empty string'],
  ])('quarantines %s', (_name, raw, reason) => {
    const c = classifyDelivery(Buffer.from(raw), 'events');
    expect(c.status).toBe('invalid');
    expect(c.invalidReason).toContain(reason);
    expect(c.dedupKey).toBe(`sha256:${sha256Hex(Buffer.from(raw))}`);
  });

  it('quarantines invalid UTF-8 and keeps no text (the bytes are stored as they came)', () => {
    const raw = Buffer.from([0x7b, 0x22, 0x65, 0xff, 0xfe, 0x22, 0x7d]);
    const c = classifyDelivery(raw, 'events');
    expect(c).toMatchObject({ status: 'invalid', text: null, invalidReason: 'body is not valid UTF-8' });
  });

  it('keeps the text byte-exact, BOM and trailing newline included', () => {
    const raw = `\uFEFF${JSON.stringify(event)}\n`;
    const c = classifyDelivery(Buffer.from(raw), 'events');
    expect(c.status).toBe('pending');
    expect(Buffer.from(c.text as string).equals(Buffer.from(raw))).toBe(true);
  });

  it('treats __proto__ and constructor keys as data', () => {
    const raw =
      '{"__proto__":{"evento":"proposta.aprovada"},"constructor":{"prototype":{"x":1}},"metadata":{"__proto__":{"webhook_id":"evil"}}}';
    const c = classifyDelivery(Buffer.from(raw), 'events');
    expect(c.status).toBe('invalid');
    expect(c.webhookId).toBeNull();
    expect(({} as Record<string, unknown>).evento).toBeUndefined();
  });

  it('survives JSON nested 10 000 deep', () => {
    const raw = `${'['.repeat(10000)}${']'.repeat(10000)}`;
    expect(classifyDelivery(Buffer.from(raw), 'events').status).toBe('invalid');
    const obj = `{"evento":"proposta.aprovada","dados":${'{"a":'.repeat(10000)}1${'}'.repeat(10000)}}`;
    expect(classifyDelivery(Buffer.from(obj), 'events').status).toBe('pending');
  });

  it('never throws on random bytes', () => {
    let seed = 1;
    const rand = () => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed;
    };
    for (let i = 0; i < 2000; i++) {
      const raw = Buffer.alloc(rand() % 64, 0).map(() => rand() % 256);
      expect(() => classifyDelivery(raw, i % 2 ? 'events' : 'registry')).not.toThrow();
    }
  });
});

describe('classifyDelivery: the fields as read', () => {
  it.each<[unknown, number | null]>([
    [2, 2],
    [0, 0],
    ['3', 3],
    [' 3 ', 3],
    ['0', 0],
    ['123456789', 123456789],
    ['1234567890', null],
    ['-1', null],
    ['x3', null],
    ['3x', null],
    ['', null],
    [-1, null],
    [1.5, null],
    [null, null],
  ])('metadata.tentativa %p → %p', (tentativa, expected) => {
    const body = { ...event, metadata: { webhook_id: 'wh_t', tentativa } };
    expect(classifyDelivery(b(body), 'events').tentativa).toBe(expected);
  });

  it.each<[Record<string, unknown>, Record<string, unknown>, number | string | null]>([
    [{ nu_proposta: 7 }, {}, 7],
    [{ nu_proposta: ' 42 ' }, {}, 42],
    [{ nu_proposta: '123456789012345' }, {}, 123456789012345],
    [{ nu_proposta: '1234567890123456' }, {}, '1234567890123456'],
    [{ nu_proposta: 'ABC-1 ' }, {}, 'ABC-1'],
    [{ nu_proposta: '12a' }, {}, '12a'],
    [{ nu_proposta: 'a12' }, {}, 'a12'],
    [{ nu_proposta: '  ' }, {}, null],
    [{ nu_proposta: 1.5 }, {}, '1.5'],
    [{ nu_proposta: true }, {}, null],
    // Where dados has none, the top level's.
    [{}, { nu_proposta: 9 }, 9],
    [{ nu_proposta: 8 }, { nu_proposta: 9 }, 8],
    [{}, {}, null],
  ])('a registry result with dados %j and top level %j: nuProposta %p', (dados, top, expected) => {
    const body = { requestId: 'req-1', status: 'completed', dados, ...top };
    expect(classifyDelivery(b(body), 'registry')).toMatchObject({ kind: 'registry', nuProposta: expected });
  });

  it('trims evento', () => {
    expect(classifyDelivery(b({ ...event, evento: ' proposta.aprovada ' }), 'events').evento).toBe(
      'proposta.aprovada',
    );
  });
});
