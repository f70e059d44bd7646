import type { EffectsEnv } from '../../../src/core/effects';
import {
  driveSync,
  eventStep,
  type SpanRequest,
  type StepOps,
  type StepOptions,
} from '../../../src/core/event-step';
import { handlerEventOf, type HandlerEvent } from '../../../src/domain/event-router';
import { sqliteDialect } from '../../../src/domain/sql/dialect';

/**
 * The event step (core/event-step.ts), driven here as a store's driver drives it: the requests it
 * makes, in order, given a store's answers. Both stores run it against real databases in
 * test/integration/store-conformance.test.ts (processing); this table names what it asks for.
 */

const NOW = new Date('2026-11-26T12:00:00.000Z');

const eventOf = (
  over: { evento?: string; attempts?: number; kind?: HandlerEvent['kind']; requestId?: string } = {},
) =>
  handlerEventOf({
    id: 7,
    kind: over.kind ?? 'event',
    evento: over.kind === 'registry' ? null : (over.evento ?? 'proposta.criada'),
    nu_proposta: 4242,
    request_id: over.requestId ?? null,
    registry_status: null,
    webhook_id: 'wh-7',
    dedup_key: 'wh-7',
    tentativa: 1,
    received_at: NOW.toISOString(),
    attempts: over.attempts ?? 0,
    body: '{"evento":"proposta.criada","dados":{"nu_proposta":4242}}',
  });

const env: EffectsEnv = {
  dialect: sqliteDialect,
  now: NOW,
  logger: { info: () => undefined, warn: () => undefined },
  schedule: { graceMs: 60_000, intervalMs: 30_000, maxIntervalMs: 600_000, maxAgeMs: 86_400_000 },
};

const options = (over: Partial<StepOptions> = {}): StepOptions => ({
  maxAttempts: 3,
  backoff: { baseMs: 1000, maxMs: 1000 },
  random: () => 0.5,
  outbox: { destinations: [], feedEnabled: true },
  partnerFor: () => false,
  traced: false,
  ...over,
});

/** Records each request; a statement named in `failAt` throws; the read-back answers no row. */
function recording(failAt?: string): { log: string[]; params: Map<string, unknown[]>; ops: StepOps<'sync'> } {
  const log: string[] = [];
  const params = new Map<string, unknown[]>();
  const ops: StepOps<'sync'> = {
    rows: (s, p) => {
      const name = s.name.replace(/^consig_(effects|step)_/, '');
      log.push(name);
      params.set(name, [...p]);
      if (name === failAt) throw new Error(`${name} refused`);
      // A transition is new: the proposal's statement follows.
      return name === 'record' ? [{ id: 1 }] : [];
    },
    firstPoll: (requestId) => void log.push(`first poll ${requestId}`),
    savepoint: (kind, error) => void log.push(`savepoint ${kind}${error ? `: ${error.message}` : ''}`),
    partner: (event) => void log.push(`partner ${event.evento}`),
    outbox: (entries) => void log.push(`outbox ${entries.length}`),
    span: <T>(span: SpanRequest, fn: () => T): T => {
      const name = 'stage' in span ? span.stage : 'processing';
      log.push(`<${name}>`);
      const r = fn();
      log.push(`</${name}>`);
      return r;
    },
  };
  return { log, params, ops };
}

describe('the event step', () => {
  it('runs the stages in order, reads the outbox back, marks done, in its savepoint', () => {
    const r = recording();
    expect(driveSync(eventStep({ event: eventOf(), traceContext: null }, env, options()), r.ops)).toEqual({
      outcome: 'done',
    });
    expect(r.log).toEqual([
      'savepoint set',
      'proposal_status',
      'record',
      'create',
      'consig_outbox_effects',
      'done',
      'savepoint release',
    ]);
    expect(r.params.get('done')).toEqual([NOW.toISOString(), 7]);
  });

  it.each([
    ['no outbox', null],
    ['no destination and no feed', { destinations: [], feedEnabled: false }],
  ])('traced, with %s: no forwarding stage and no span for it', (_name, outbox) => {
    const r = recording();
    driveSync(
      eventStep({ event: eventOf(), traceContext: null }, env, options({ outbox, traced: true })),
      r.ops,
    );
    expect(r.log.filter((l) => /^<[^/]/.test(l))).toEqual(['<processing>', '<lifecycle>']);
    expect(r.log).not.toContain('consig_outbox_effects');
  });

  it.each([
    ['an event without a requestId: no registry stage, no span for it', eventOf(), []],
    [
      'an event with a requestId: its registration tracked (known already: filled in), in a span',
      eventOf({ requestId: 'req-1' }),
      ['<registry_tracking>', 'track', 'fill', '</registry_tracking>'],
    ],
    ['a registry result without a requestId: no registry stage', eventOf({ kind: 'registry' }), []],
    [
      'a registry result: its registration read, in a span',
      eventOf({ kind: 'registry', requestId: 'req-1' }),
      ['<registry_results>', 'averbacao_state', 'track', 'fill', '</registry_results>'],
    ],
  ])('traced, %s', (_name, event, registry) => {
    const r = recording();
    driveSync(eventStep({ event, traceContext: null }, env, options({ outbox: null, traced: true })), r.ops);
    const from = r.log.findIndex((l) => l.startsWith('<registry'));
    const to = r.log.findIndex((l) => l.startsWith('</registry'));
    expect(from === -1 ? [] : r.log.slice(from, to + 1)).toEqual(registry);
    expect(r.log.slice(-3)).toEqual(['done', '</processing>', 'savepoint release']);
  });

  it("asks for the partner's handlers after the built-ins and before the outbox, when it has any", () => {
    const r = recording();
    const o = options({ partnerFor: () => true, outbox: null });
    driveSync(eventStep({ event: eventOf(), traceContext: null }, env, o), r.ops);
    expect(r.log).toEqual([
      'savepoint set',
      'proposal_status',
      'record',
      'create',
      'partner proposta.criada',
      'done',
      'savepoint release',
    ]);
  });

  it.each([
    ['a retry, below maxAttempts', 0, 'failed', 'retry', '2026-11-26T12:00:00.750Z', null],
    ['dead at maxAttempts, with the time it died', 2, 'dead', 'dead', null, NOW.toISOString()],
  ])(
    'a statement that throws: the savepoint rolled back, the failure recorded (%s)',
    (_, attempts, status, outcome, next, died) => {
      const r = recording('create');
      const report = driveSync(
        eventStep({ event: eventOf({ attempts }), traceContext: null }, env, options()),
        r.ops,
      );
      expect(report).toMatchObject({ outcome, failure: { status, attempts: attempts + 1 } });
      expect(r.log).toEqual([
        'savepoint set',
        'proposal_status',
        'record',
        'create',
        'savepoint rollback: create refused',
        'failed',
      ]);
      expect(r.params.get('failed')).toEqual([7, status, attempts + 1, 'create refused', next, died]);
    },
  );

  it('an attempt that already threw (a turn that ran it in its fast pass) is recorded, not run again', () => {
    const r = recording();
    const threw = new Error('partner said no');
    const report = driveSync(
      eventStep({ event: eventOf(), traceContext: null, threw }, env, options()),
      r.ops,
    );
    expect(report.outcome).toBe('retry');
    expect(r.log).toEqual(['savepoint set', 'savepoint rollback: partner said no', 'failed']);
  });

  it.each([
    [
      "continuing the delivery's trace: the event id and the attempt",
      '00-abc',
      ['consig.event_id', 'consig.attempt'],
    ],
    [
      'starting a trace of its own: what the delivery was too',
      null,
      [
        'consig.event_id',
        'consig.kind',
        'consig.evento',
        'consig.nu_proposta',
        'consig.webhook_id',
        'consig.attempt',
      ],
    ],
  ])('traced, the processing span %s', (_name, traceContext, keys) => {
    const r = recording();
    const spans: SpanRequest[] = [];
    const span = r.ops.span;
    r.ops.span = (s, fn) => (spans.push(s), span(s, fn));
    driveSync(eventStep({ event: eventOf(), traceContext }, env, options({ traced: true })), r.ops);
    expect(spans[0]).toMatchObject({ processing: traceContext, name: 'process proposta.criada' });
    const attributes = (spans[0] as { attributes: Record<string, unknown> }).attributes;
    expect(Object.keys(attributes).filter((k) => attributes[k] !== null)).toEqual(keys);
  });

  it('traced: the work in a processing span, each stage in a child span, the failure outside them', () => {
    const r = recording();
    const event = eventOf({ kind: 'registry', requestId: 'req-1' });
    driveSync(eventStep({ event, traceContext: '00-abc' }, env, options({ traced: true })), r.ops);
    expect(r.log).toEqual([
      'savepoint set',
      '<processing>',
      '<registry_results>',
      'averbacao_state',
      'track',
      'fill',
      '</registry_results>',
      '<forwarding>',
      'consig_outbox_effects',
      '</forwarding>',
      'done',
      '</processing>',
      'savepoint release',
    ]);
  });
});
