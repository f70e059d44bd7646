import { join } from 'node:path';

import { createHash } from 'node:crypto';
import fc from 'fast-check';
import type { Evento } from '../../../../src/domain/catalogue';
import { compileFilter, type Filter } from '../../../../src/domain/forwarding/filter';
import * as Messages from '../../../../src/domain/forwarding/messages';
import {
  type AverbacaoSnapshot,
  type EventEffects,
  type OutgoingMessage,
  type ProcessedEvent,
  type ProposalSnapshot,
  type RecordedTransition,
} from '../../../../src/domain/forwarding/messages';
import { type ProposalStatus, transition } from '../../../../src/domain/lifecycle';
import { loadAgainInEachTest } from '../fresh-module';

// Loaded again in each test, so that Stryker runs these tests against its module-level tables and
// patterns too (fresh-module.ts).
loadAgainInEachTest(Messages, join(__dirname, '../../../../src/domain/forwarding/messages'));
const {
  bodyFor,
  destinationWants,
  messagesFor,
  messageWebhookId,
  orderKeyOf,
  isStored,
  outboxEntries,
  serializeMessage,
} = Messages;

/**
 * The messages the receiver forwards (contract §8): one valid processed event, then one thing
 * changed per case. Transitions come from the real state machine, so `from`/`to`/`applied` are
 * what the life-cycle handler records.
 */

const CPF = '12345678909';
const MASKED = '***.456.789-**';
const AT = '2026-11-23T10:00:05.000Z';
const RECEIVED = '2026-11-23T10:00:00.000Z';

/** What the life cycle records for `evento` reaching a proposal at `current`. */
function recorded(current: ProposalStatus | null, evento: Evento): RecordedTransition {
  const t = transition(current, evento);
  return { from_status: t.from, to_status: t.to, applied: t.applied, reason: t.reason };
}

function proposal(overrides: Partial<ProposalSnapshot> = {}): ProposalSnapshot {
  return {
    nu_proposta: 123,
    uuid: 'u-123',
    nu_cpf: CPF,
    nu_cnpj_conveniada: '11222333000181',
    vl_emprestimo: 15000.5,
    no_conveniada: 'Empresa Exemplo Ltda',
    stage: 'Proposta',
    status: 'aprovada',
    last_evento: 'proposta.aprovada',
    created_at: '2026-11-23T09:00:00.000Z',
    updated_at: AT,
    ...overrides,
  };
}

function averbacao(overrides: Partial<AverbacaoSnapshot> = {}): AverbacaoSnapshot {
  return {
    request_id: 'req-1',
    correlation_id: 'corr-1',
    nu_proposta: 123,
    status: 'completed',
    result_source: 'webhook',
    stale: 0,
    result_body: '{"requestId":"req-1","status":"completed"}',
    completed_at: AT,
    updated_at: AT,
    ...overrides,
  };
}

const payload = {
  evento: 'proposta.aprovada',
  timestamp: '2026-11-23T07:00:00-03:00',
  dados: { nu_proposta: 123, nu_cpf: CPF, st_proposta: 'aprovada' },
  metadata: { tentativa: 1, webhook_id: 'wh_1' },
};

function event(overrides: Partial<ProcessedEvent> = {}): ProcessedEvent {
  return {
    id: 42,
    kind: 'event',
    evento: 'proposta.aprovada',
    nu_proposta: 123,
    request_id: null,
    dedup_key: 'wh_1',
    received_at: RECEIVED,
    payload,
    ...overrides,
  };
}

/** A life-cycle event that moved proposal 123 from pre_aprovada to aprovada. */
function effects(overrides: Partial<EventEffects> = {}): EventEffects {
  return {
    event: event(),
    transition: recorded('pre_aprovada', 'proposta.aprovada'),
    proposal: proposal(),
    proposalAverbacao: null,
    finishedAverbacao: null,
    ...overrides,
  };
}

/** The webhook-id of the fixture event's (dedup key `wh_1`) message of `type`. */
const idOf = (type: OutgoingMessage['type']) => messageWebhookId('wh_1', type);
const RECEIVED_ID = idOf('event.received');
const CHANGED_ID = idOf('proposal.changed');
const RESULT_ID = idOf('averbacao.result');

const build = (e: EventEffects = effects()) => messagesFor(e, AT);

function only(messages: OutgoingMessage[], type: OutgoingMessage['type']): OutgoingMessage {
  const found = messages.filter((m) => m.type === type);
  expect(found).toHaveLength(1);
  return found[0] as OutgoingMessage;
}

/** A registry result (kind registry, no evento) that gave req-1 its final result. */
const registryResult = (overrides: Partial<EventEffects> = {}) =>
  effects({
    event: event({
      id: 50,
      kind: 'registry',
      evento: null,
      nu_proposta: null,
      request_id: 'req-1',
      payload: { requestId: 'req-1', status: 'completed' },
    }),
    transition: null,
    proposal: null,
    finishedAverbacao: averbacao(),
    ...overrides,
  });

describe('messagesFor: body shapes (contract §8)', () => {
  it('a life-cycle event: event.received then proposal.changed, each { id, type, created_at, data }', () => {
    const [received, changed, ...rest] = build();
    expect(rest).toEqual([]);
    expect(received).toEqual({
      type: 'event.received',
      webhookId: RECEIVED_ID,
      eventId: 42,
      evento: 'proposta.aprovada',
      nuProposta: 123,
      requestId: null,
      orderKey: 'p:123',
      createdAt: AT,
      body: {
        id: RECEIVED_ID,
        type: 'event.received',
        created_at: AT,
        data: {
          event_id: 42,
          received_at: RECEIVED,
          kind: 'event',
          evento: 'proposta.aprovada',
          nu_proposta: 123,
          request_id: null,
          payload, // the service's payload as received
        },
      },
    });
    expect(changed).toEqual({
      type: 'proposal.changed',
      webhookId: CHANGED_ID,
      eventId: 42,
      evento: 'proposta.aprovada',
      nuProposta: 123,
      requestId: null,
      orderKey: 'p:123',
      createdAt: AT,
      body: {
        id: CHANGED_ID,
        type: 'proposal.changed',
        created_at: AT,
        data: {
          nu_proposta: 123,
          evento: 'proposta.aprovada',
          event_id: 42,
          received_at: RECEIVED,
          from: 'pre_aprovada',
          from_stage: 'Proposta',
          to: 'aprovada',
          stage: 'Proposta',
          applied: true,
          reason: 'forward',
          averbacao: null,
          proposal: proposal(),
        },
      },
    });
  });

  it('the body id is the webhook-id, one per message type of the event', () => {
    const messages = messagesFor(
      registryResult({ transition: recorded(null, 'proposta.criada'), proposal: proposal() }),
      AT,
    );
    expect(messages.map((m) => [m.type, m.webhookId, m.body.id])).toEqual([
      ['event.received', RECEIVED_ID, RECEIVED_ID],
      ['proposal.changed', CHANGED_ID, CHANGED_ID],
      ['averbacao.result', RESULT_ID, RESULT_ID],
    ]);
    expect(messages.every((m) => m.createdAt === AT && m.body.created_at === AT)).toBe(true);
  });

  it('proposal.changed of the first event seen: from and from_stage are null', () => {
    const changed = only(
      build(effects({ transition: recorded(null, 'proposta.criada') })),
      'proposal.changed',
    );
    expect(changed.body.data).toMatchObject({
      from: null,
      from_stage: null,
      to: 'em_analise',
      stage: 'Proposta',
      applied: true,
      reason: 'created',
    });
  });

  it('proposal.changed across stages: from_stage and stage differ', () => {
    const changed = only(
      build(
        effects({
          event: event({ evento: 'averbacao.aprovada' }),
          transition: recorded('averbacao_solicitada', 'averbacao.aprovada'),
        }),
      ),
      'proposal.changed',
    );
    expect(changed.body.data).toMatchObject({
      from: 'averbacao_solicitada',
      from_stage: 'Averbação',
      to: 'averbada',
      stage: 'Averbação',
    });
    const later = only(
      build(
        effects({
          event: event({ evento: 'formalizacao.iniciada' }),
          transition: recorded('averbada', 'formalizacao.iniciada'),
        }),
      ),
      'proposal.changed',
    );
    expect(later.body.data).toMatchObject({ from_stage: 'Averbação', stage: 'Formalização' });
  });

  it.each<[string, ProposalStatus, Evento, string]>([
    ['an earlier event arriving late', 'averbada', 'proposta.aprovada', 'late'],
    ['a repeat of the current status', 'aprovada', 'proposta.aprovada', 'same_status'],
    ['anything after a final status', 'paga', 'pagamento.falha', 'after_final'],
  ])('%s: proposal.changed with applied=false and the reason', (_name, current, evento, reason) => {
    const changed = only(
      build(
        effects({
          event: event({ evento }),
          transition: recorded(current, evento),
          proposal: proposal({ status: current }),
        }),
      ),
      'proposal.changed',
    );
    expect(changed.body.data).toMatchObject({ from: current, applied: false, reason, evento });
    // The proposal did not move: its current data says where it stands.
    expect((changed.body.data.proposal as ProposalSnapshot).status).toBe(current);
  });

  it('proposal.changed shows the proposal’s averbação when there is one', () => {
    const changed = only(
      build(
        effects({
          proposalAverbacao: averbacao({
            status: 'processing',
            result_source: null,
            stale: 1,
            completed_at: null,
          }),
        }),
      ),
      'proposal.changed',
    );
    expect(changed.body.data.averbacao).toEqual({
      request_id: 'req-1',
      correlation_id: 'corr-1',
      status: 'processing',
      source: null,
      stale: true,
      completed_at: null,
    });
  });

  it('averbacao.result: the registration’s summary and its result parsed', () => {
    const result = only(build(registryResult()), 'averbacao.result');
    expect(result).toMatchObject({ evento: null, nuProposta: 123, requestId: 'req-1', eventId: 50 });
    expect(result.body).toEqual({
      id: RESULT_ID,
      type: 'averbacao.result',
      created_at: AT,
      data: {
        request_id: 'req-1',
        correlation_id: 'corr-1',
        status: 'completed',
        source: 'webhook',
        stale: false,
        completed_at: AT,
        nu_proposta: 123,
        event_id: 50,
        received_at: RECEIVED,
        result: { requestId: 'req-1', status: 'completed' },
      },
    });
  });

  it.each<[string, string | null, unknown]>([
    [
      'a JSON result is parsed',
      '{"dados":{"status":"error","motivo":"margem"}}',
      { dados: { status: 'error', motivo: 'margem' } },
    ],
    ['a result that is not JSON is kept as text', 'erro interno', 'erro interno'],
    ['no result body: null', null, null],
  ])('averbacao.result: %s', (_name, body, expected) => {
    const result = only(
      build(registryResult({ finishedAverbacao: averbacao({ status: 'error', result_body: body }) })),
      'averbacao.result',
    );
    expect(result.body.data.result).toEqual(expected);
    expect(result.body.data.status).toBe('error');
  });

  it('a result found by polling: averbacao.result with source poll, and no event.received', () => {
    const messages = build(
      registryResult({
        event: event({
          id: 51,
          kind: 'poll',
          evento: null,
          nu_proposta: null,
          request_id: 'req-1',
          payload: { status: 'completed' },
        }),
        finishedAverbacao: averbacao({ result_source: 'poll' }),
      }),
    );
    expect(messages.map((m) => m.type)).toEqual(['averbacao.result']);
    expect(messages[0]?.body.data).toMatchObject({ source: 'poll', event_id: 51 });
  });
});

describe('messagesFor: which messages an event causes', () => {
  const types = (e: EventEffects) => build(e).map((m) => m.type);

  it.each<[string, EventEffects, string[]]>([
    ['a life-cycle event that recorded a transition', effects(), ['event.received', 'proposal.changed']],
    [
      'an event that moved no proposal (no transition)',
      effects({ transition: null, proposal: null }),
      ['event.received'],
    ],
    [
      'a transition without its proposal is not a proposal.changed',
      effects({ proposal: null }),
      ['event.received'],
    ],
    [
      'a body that does not parse is not forwarded as received',
      effects({ event: event({ payload: undefined }) }),
      ['proposal.changed'],
    ],
    [
      'a registry result that finished a registration',
      registryResult(),
      ['event.received', 'averbacao.result'],
    ],
    [
      'a registry result that finished nothing',
      registryResult({ finishedAverbacao: null }),
      ['event.received'],
    ],
    [
      'a poll answer that finished a registration',
      registryResult({
        event: event({ kind: 'poll', evento: null, nu_proposta: null, request_id: 'req-1' }),
      }),
      ['averbacao.result'],
    ],
    [
      'a poll answer that finished nothing: nothing at all',
      registryResult({
        event: event({ kind: 'poll', evento: null, nu_proposta: null, request_id: 'req-1' }),
        finishedAverbacao: null,
      }),
      [],
    ],
  ])('%s', (_name, e, expected) => {
    expect(types(e)).toEqual(expected);
  });

  it('a payload of null is still received (only undefined means "did not parse")', () => {
    expect(types(effects({ event: event({ payload: null }) }))).toEqual([
      'event.received',
      'proposal.changed',
    ]);
  });
});

describe('order keys: the proposal, then the registration, then the event', () => {
  it.each<[number | string | null, string | null, number, string]>([
    [123, 'req-1', 7, 'p:123'],
    [123, null, 7, 'p:123'],
    ['ABC-9', null, 7, 'p:ABC-9'], // a nu_proposta kept as text
    [0, null, 7, 'p:0'], // 0 is a proposal, not "none"
    [null, 'req-1', 7, 'r:req-1'],
    [null, null, 7, 'e:7'],
  ])('orderKeyOf(%p, %p, %p) = %p', (nu, requestId, eventId, expected) => {
    expect(orderKeyOf(nu, requestId, eventId)).toBe(expected);
  });

  it.each<[string, EventEffects, Record<string, string>]>([
    [
      'a life-cycle event: every message in its proposal’s line',
      effects(),
      { 'event.received': 'p:123', 'proposal.changed': 'p:123' },
    ],
    [
      'a life-cycle event carrying a requestId: still the proposal’s line',
      effects({ event: event({ request_id: 'req-1' }) }),
      { 'event.received': 'p:123', 'proposal.changed': 'p:123' },
    ],
    [
      'a registry result without nu_proposta: the finished averbação’s proposal',
      registryResult(),
      { 'event.received': 'p:123', 'averbacao.result': 'p:123' },
    ],
    [
      'a registry result of a registration no proposal is known for: the registration’s line',
      registryResult({ finishedAverbacao: averbacao({ nu_proposta: null }) }),
      { 'event.received': 'r:req-1', 'averbacao.result': 'r:req-1' },
    ],
    [
      'a registry result without nu_proposta that moved a proposal: that proposal’s line, its averbação’s too',
      registryResult({
        transition: recorded(null, 'proposta.criada'),
        proposal: proposal(),
        finishedAverbacao: averbacao({ nu_proposta: null }),
      }),
      { 'event.received': 'p:123', 'proposal.changed': 'p:123', 'averbacao.result': 'p:123' },
    ],
    [
      'an event with neither proposal nor registration: its own line',
      effects({ event: event({ nu_proposta: null }), transition: null, proposal: null }),
      { 'event.received': 'e:42' },
    ],
  ])('%s', (_name, e, expected) => {
    const messages = build(e);
    expect(Object.fromEntries(messages.map((m) => [m.type, m.orderKey]))).toEqual(expected);
    for (const m of messages) expect(m.orderKey).toBe(orderKeyOf(m.nuProposta, m.requestId, m.eventId));
  });
});

describe('destinationWants', () => {
  function filter(value: unknown): Filter {
    const compiled = compileFilter(value, 'test');
    if (!compiled.ok) throw new Error(compiled.error);
    return compiled.filter;
  }

  const everything = { types: ['*'], eventos: ['*'], filter: null };
  const averbacaoChanged = only(
    build(
      effects({
        event: event({ evento: 'averbacao.aprovada' }),
        transition: recorded('averbacao_solicitada', 'averbacao.aprovada'),
        proposal: proposal({ status: 'averbada', stage: 'Averbação' }),
      }),
    ),
    'proposal.changed',
  );
  const [received, changed] = build() as [OutgoingMessage, OutgoingMessage];
  const result = only(build(registryResult()), 'averbacao.result');

  it.each<[string, Parameters<typeof destinationWants>[0], OutgoingMessage, boolean]>([
    ['every type and evento: a proposal.changed', everything, changed, true],
    ['every type and evento: an averbacao.result', everything, result, true],
    ['a type listed', { ...everything, types: ['proposal.changed'] }, changed, true],
    ['a type not listed', { ...everything, types: ['proposal.changed'] }, received, false],
    ['a type glob', { ...everything, types: ['proposal.*'] }, changed, true],
    ['a type glob that does not match', { ...everything, types: ['averbacao.*'] }, changed, false],
    ['several type globs, one matches', { ...everything, types: ['event.*', 'averbacao.*'] }, result, true],
    ['an evento glob that matches', { ...everything, eventos: ['averbacao.*'] }, averbacaoChanged, true],
    ['an evento glob that does not match', { ...everything, eventos: ['averbacao.*'] }, changed, false],
    ['an exact evento', { ...everything, eventos: ['proposta.aprovada'] }, received, true],
    [
      'a message without evento is chosen by type alone',
      { ...everything, eventos: ['averbacao.*'] },
      result,
      true,
    ],
    [
      'without evento, the type still has to match',
      { ...everything, types: ['proposal.changed'], eventos: ['averbacao.*'] },
      result,
      false,
    ],
    [
      'type and evento both match',
      { ...everything, types: ['proposal.changed'], eventos: ['averbacao.*'] },
      averbacaoChanged,
      true,
    ],
    [
      'a filter that holds',
      { ...everything, filter: filter({ 'data.to': { $in: ['averbada'] } }) },
      averbacaoChanged,
      true,
    ],
    [
      'a filter that does not hold',
      { ...everything, filter: filter({ 'data.to': { $in: ['averbada'] } }) },
      changed,
      false,
    ],
    [
      'a filter on a path the message type lacks',
      { ...everything, filter: filter({ 'data.to': { $in: ['averbada'] } }) },
      received,
      false,
    ],
    [
      'the filter sees the CPF in full (the body as stored)',
      { ...everything, filter: filter({ 'data.proposal.nu_cpf': CPF }) },
      changed,
      true,
    ],
    [
      'the type is checked before the filter',
      { ...everything, types: ['event.received'], filter: filter({ type: 'proposal.changed' }) },
      changed,
      false,
    ],
  ])('%s → %p', (_name, destination, message, expected) => {
    expect(destinationWants(destination, message)).toBe(expected);
  });
});

describe('bodyFor: the CPF masked unless the destination takes it in full (LGPD)', () => {
  const changed = only(build(), 'proposal.changed');
  const received = only(build(), 'event.received');
  const storedChanged = JSON.stringify(changed.body);
  const storedReceived = JSON.stringify(received.body);

  it('the stored body holds the CPF in full, at every depth', () => {
    expect(JSON.parse(storedChanged).data.proposal.nu_cpf).toBe(CPF);
    expect(JSON.parse(storedReceived).data.payload.dados.nu_cpf).toBe(CPF);
  });

  it('fullCpf: the stored text itself, byte for byte', () => {
    expect(bodyFor(storedChanged, true)).toBe(storedChanged);
    expect(bodyFor(storedReceived, true)).toBe(storedReceived);
    const spaced = '{ "nu_cpf" : "12345678909" }';
    expect(bodyFor(spaced, true)).toBe(spaced);
  });

  it('masked: data.proposal.nu_cpf and data.payload.dados.nu_cpf; nothing else changes', () => {
    const masked = JSON.parse(bodyFor(storedChanged, false));
    expect(masked.data.proposal.nu_cpf).toBe(MASKED);
    const expected = JSON.parse(storedChanged);
    expected.data.proposal.nu_cpf = MASKED;
    expect(masked).toEqual(expected);

    const maskedReceived = JSON.parse(bodyFor(storedReceived, false));
    expect(maskedReceived.data.payload.dados.nu_cpf).toBe(MASKED);
    const expectedReceived = JSON.parse(storedReceived);
    expectedReceived.data.payload.dados.nu_cpf = MASKED;
    expect(maskedReceived).toEqual(expectedReceived);
    expect(bodyFor(storedReceived, false)).not.toContain(CPF);
  });

  it('a stored body that is not JSON is an error, not text to guess at (stored bodies are serializeMessage’s)', () => {
    expect(() => bodyFor(`{"nu_cpf":"${CPF}"`, false)).toThrow(SyntaxError);
  });

  it('deterministic: every attempt sends the same bytes', () => {
    expect(bodyFor(storedChanged, false)).toBe(bodyFor(storedChanged, false));
  });

  it.each<[string, string, string]>([
    ['top level', `{"nu_cpf":"${CPF}"}`, `{"nu_cpf":"${MASKED}"}`],
    ['the key cpf', `{"a":{"cpf":"${CPF}"}}`, `{"a":{"cpf":"${MASKED}"}}`],
    [
      'inside an array',
      `{"list":[{"nu_cpf":"${CPF}"},{"nu_cpf":"98765432100"}]}`,
      `{"list":[{"nu_cpf":"${MASKED}"},{"nu_cpf":"***.654.321-**"}]}`,
    ],
    ['written with dots and dash', '{"nu_cpf":"123.456.789-09"}', `{"nu_cpf":"${MASKED}"}`],
    ['a number', `{"nu_cpf":${CPF}}`, `{"nu_cpf":"${MASKED}"}`],
    [
      'a number that lost its leading zero: not a CPF, masked whole',
      '{"nu_cpf":1234567890}',
      '{"nu_cpf":"***"}',
    ],
    ['an empty string', '{"nu_cpf":""}', '{"nu_cpf":"***"}'],
    ['null stays null', '{"nu_cpf":null}', '{"nu_cpf":null}'],
    ['an object under a CPF key is masked whole', `{"cpf":{"numero":"${CPF}"}}`, '{"cpf":"***"}'],
    ['an array under a CPF key is masked whole', `{"cpf":["${CPF}"]}`, '{"cpf":"***"}'],
    ['an object that cannot be made text', '{"cpf":{"toString":1}}', '{"cpf":"***"}'],
    [
      'an array of such objects (regression: threw)',
      '{"nu_cpf":[{"toString":1,"valueOf":2}]}',
      '{"nu_cpf":"***"}',
    ],
    [
      'other keys are not masked, even with 11 digits',
      `{"nu_proposta":${CPF},"cpf_x":"${CPF}"}`,
      `{"nu_proposta":${CPF},"cpf_x":"${CPF}"}`,
    ],
  ])('%s', (_name, stored, expected) => {
    expect(bodyFor(stored, false)).toBe(expected);
  });

  it.each([
    'null',
    '{}',
    '[]',
    '{"data":null}',
    '[null,{"nu_cpf":null}]',
    '{"data":{"proposal":null,"payload":null}}',
  ])('never throws on nulls: %s', (stored) => {
    expect(bodyFor(stored, false)).toBe(stored);
    expect(bodyFor(stored, true)).toBe(stored);
  });

  const CPF_KEYS = ['nu_cpf', 'cpf'];
  const leaf = fc.oneof(
    fc.stringMatching(/^\d{11}$/),
    fc.stringMatching(/^\d{3}\.\d{3}\.\d{3}-\d{2}$/),
    fc.integer({ min: 10_000_000_000, max: 99_999_999_999 }),
    fc.integer(),
    fc.string(),
    fc.boolean(),
    fc.constant(null),
  );
  const json = (keys: fc.Arbitrary<string>) =>
    fc.letrec<{ node: unknown }>((tie) => ({
      node: fc.oneof(
        { depthSize: 'small', withCrossShrink: true },
        leaf,
        fc.array(tie('node'), { maxLength: 4 }),
        fc.dictionary(keys, tie('node'), { maxKeys: 4 }),
      ),
    })).node;

  /** Every string, number and boolean under a CPF key, at any depth below it. */
  function leavesUnderCpfKeys(value: unknown, under = false, out: unknown[] = []): unknown[] {
    if (Array.isArray(value)) for (const item of value) leavesUnderCpfKeys(item, under, out);
    else if (typeof value === 'object' && value !== null) {
      for (const [key, inner] of Object.entries(value)) {
        leavesUnderCpfKeys(inner, under || CPF_KEYS.includes(key), out);
      }
    } else if (under && value !== null) out.push(value);
    return out;
  }

  it('property: nothing under a CPF key keeps 11 digits, whatever the JSON around it', () => {
    const keys = fc.oneof(fc.constantFrom(...CPF_KEYS), fc.string({ maxLength: 6 }));
    fc.assert(
      fc.property(json(keys), (value) => {
        const masked: unknown = JSON.parse(bodyFor(JSON.stringify(value), false));
        for (const leaf of leavesUnderCpfKeys(masked)) {
          expect(String(leaf).replace(/\D/g, '')).not.toMatch(/\d{11}/);
        }
      }),
    );
  });

  it('property: a body without CPF keys comes back byte for byte, masked or not', () => {
    const keys = fc.string({ maxLength: 6 }).filter((k) => !CPF_KEYS.includes(k));
    fc.assert(
      fc.property(json(keys), (value) => {
        const stored = JSON.stringify(value);
        expect(bodyFor(stored, false)).toBe(stored);
      }),
    );
  });
});

describe('serializeMessage: the service JSON is embedded as received', () => {
  const effectsWith = (raw: string, parsed: unknown) => ({
    event: { ...event(), payload: parsed, raw_body: raw },
    transition: null,
    proposal: null,
    proposalAverbacao: null,
    finishedAverbacao: null,
  });

  it('gives the same text as JSON.stringify when the raw body is compact', () => {
    const raw = JSON.stringify(payload);
    const [message] = messagesFor(effectsWith(raw, payload), AT);
    expect(serializeMessage(message as OutgoingMessage)).toBe(
      JSON.stringify((message as OutgoingMessage).body),
    );
  });

  it('keeps the service bytes (spacing, key order) exactly', () => {
    const raw = '{ "evento" : "proposta.aprovada",\n  "dados": {"nu_proposta": 123} }';
    const [message] = messagesFor(effectsWith(raw, JSON.parse(raw)), AT);
    const text = serializeMessage(message as OutgoingMessage);
    expect(text.endsWith(`"payload":${raw}}}`)).toBe(true);
    expect(JSON.parse(text).data.payload).toEqual(JSON.parse(raw));
  });

  it('serialises a payload nested 10 000 levels deep (regression: JSON.stringify overflowed the stack)', () => {
    const depth = 10_000;
    const raw = `{"evento":"proposta.aprovada","dados":{"nu_proposta":123,"nu_cpf":"${CPF}"},"x":${'['.repeat(depth)}${']'.repeat(depth)}}`;
    const [message] = messagesFor(effectsWith(raw, JSON.parse(raw)), AT);
    const text = serializeMessage(message as OutgoingMessage);
    expect(text.length).toBeGreaterThan(2 * depth);
    // Masking cannot walk it either: the text fallback masks every CPF-shaped number.
    const masked = bodyFor(text, false);
    expect(masked).not.toContain(CPF);
    expect(masked.length).toBeGreaterThan(2 * depth);
  });

  it('refuses a raw field that would not be the last of data (its bytes are spliced in at the end)', () => {
    const body = {
      id: 'msg_1',
      type: 'event.received' as const,
      created_at: AT,
      data: { payload: 1, after: 2 },
    };
    expect(() => serializeMessage({ body, rawField: { key: 'payload', json: '{}' } })).toThrow(
      'serializeMessage: payload is not the last field of data',
    );
  });

  it('embeds a parsed registry result raw, and a result that is not JSON as a string', () => {
    const finished = (result_body: string) => ({
      event: { ...event({ kind: 'registry', evento: null, nu_proposta: null, request_id: 'req-1' }) },
      transition: null,
      proposal: null,
      proposalAverbacao: null,
      finishedAverbacao: averbacao({ result_body }),
    });
    const [, json] = messagesFor(finished('{"status" : "completed"}'), AT);
    expect(serializeMessage(json as OutgoingMessage).endsWith('"result":{"status" : "completed"}}}')).toBe(
      true,
    );
    const [, text] = messagesFor(finished('not json'), AT);
    expect(JSON.parse(serializeMessage(text as OutgoingMessage)).data.result).toBe('not json');
  });
});

describe('messageWebhookId: the same fact, the same id (issue 32)', () => {
  it('a fixed vector: msg_ and the first 128 bits of SHA-256 over "<dedup key>\\n<type>", base64url', () => {
    const expected = `msg_${createHash('sha256').update('wh_1\nproposal.changed').digest().subarray(0, 16).toString('base64url')}`;
    expect(messageWebhookId('wh_1', 'proposal.changed')).toBe(expected);
    expect(expected).toMatch(/^msg_[A-Za-z0-9_-]{22}$/);
  });

  type Id = [string, OutgoingMessage['type']];
  it.each<[string, Id, Id]>([
    ['another type of the same event', ['wh_1', 'event.received'], ['wh_1', 'proposal.changed']],
    ['the same type of another event', ['wh_1', 'proposal.changed'], ['wh_2', 'proposal.changed']],
    ['a key that extends the other', ['wh_1', 'averbacao.result'], ['wh_10', 'averbacao.result']],
    ['a key ending where a type begins', ['wh_1\nproposal', 'event.received'], ['wh_1', 'event.received']],
  ])('differs for %s', (_name, a, b) => {
    expect(messageWebhookId(...a)).not.toBe(messageWebhookId(...b));
  });

  it('an event processed twice (its first processing lost with a failed-over primary) yields the same ids', () => {
    const first = messagesFor(
      registryResult({ transition: recorded(null, 'proposta.criada'), proposal: proposal() }),
      AT,
    );
    const again = messagesFor(
      registryResult({
        event: { ...event({ kind: 'registry', evento: null, request_id: 'req-1' }), id: 9_000_000_001 },
        transition: recorded(null, 'proposta.criada'),
        proposal: proposal(),
      }),
      '2026-11-23T12:00:00.000Z',
    );
    expect(again.map((m) => m.webhookId)).toEqual(first.map((m) => m.webhookId));
  });
});

describe('isStored: a message is written only when something will read it', () => {
  it.each<[OutgoingMessage['type'], number, boolean, boolean]>([
    ['event.received', 0, false, false],
    ['event.received', 0, true, false],
    ['event.received', 1, false, true],
    ['proposal.changed', 0, false, false],
    ['proposal.changed', 0, true, true],
    ['proposal.changed', 2, false, true],
    ['averbacao.result', 0, true, true],
    ['averbacao.result', 0, false, false],
  ])('%s wanted by %i, feed %s → %s', (type, wantedBy, feed, stored) => {
    expect(isStored(type, wantedBy, feed)).toBe(stored);
  });
});

describe('outboxEntries: each message with the destinations that want it, if stored at all', () => {
  const receivedOnly = { name: 'received-only', types: ['event.received'], eventos: ['*'], filter: null };
  const everything = { name: 'everything', types: ['*'], eventos: ['*'], filter: null };
  const otherEvento = { name: 'other-evento', types: ['*'], eventos: ['averbacao.*'], filter: null };
  type Dest = typeof everything;

  it.each<[string, Dest[], boolean, [OutgoingMessage['type'], string[]][]]>([
    ['no destination, feed off: nothing', [], false, []],
    ['no destination, feed on: the feed’s types, for no one', [], true, [['proposal.changed', []]]],
    [
      'each message to those that want it',
      [receivedOnly, everything, otherEvento],
      false,
      [
        ['event.received', ['received-only', 'everything']],
        ['proposal.changed', ['everything']],
      ],
    ],
    [
      'feed on: a feed type wanted by none is stored for the feed',
      [receivedOnly],
      true,
      [
        ['event.received', ['received-only']],
        ['proposal.changed', []],
      ],
    ],
    ['wanted by none, feed off: not stored', [otherEvento], false, []],
  ])('%s', (_name, destinations, feed, expected) => {
    const entries = outboxEntries(effects(), AT, destinations, feed);
    expect(entries.map((e) => [e.message.type, e.destinations])).toEqual(expected);
    expect(entries.map((e) => e.message)).toEqual(
      build().filter((m) => expected.some(([type]) => type === m.type)),
    );
  });
});
