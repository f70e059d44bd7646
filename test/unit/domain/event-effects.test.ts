import {
  type AverbacaoState,
  lifecycleInput,
  lifecycleSkipLog,
  type RegistryEffect,
  registrationOf,
  registryResultEffects,
  trackFromEventEffects,
} from '../../../src/domain/event-effects';
import { eventFacts } from '../../helpers/events';

/** The life-cycle handler's first decision, made once for both stores (core/effects.ts). */

const facts = eventFacts;

describe('lifecycleInput and lifecycleSkipLog', () => {
  it.each([
    ['a life-cycle event with its nu_proposta', facts({ nuProposta: 4242 }), { move: true, nu: 4242 }, null],
    ['nu_proposta from dados', facts({ dados: { nu_proposta: 77 } }), { move: true, nu: 77 }, null],
    [
      'a life-cycle event without nu_proposta',
      facts({ dados: {} }),
      { move: false, reason: 'no_nu_proposta' },
      'life-cycle event without nu_proposta: nothing to move',
    ],
    [
      'a registry result',
      facts({ kind: 'registry', evento: null }),
      { move: false, reason: 'not_lifecycle' },
      null,
    ],
    ['a poll answer', facts({ kind: 'poll', evento: null }), { move: false, reason: 'not_lifecycle' }, null],
    // Only the life-cycle route's events move a proposal, whatever a registry result's body names.
    [
      'a registry result naming a life-cycle evento',
      facts({ kind: 'registry', evento: 'proposta.aprovada', nuProposta: 1 }),
      { move: false, reason: 'not_lifecycle' },
      null,
    ],
    [
      'an unknown evento',
      facts({ evento: 'proposta.teleportada', nuProposta: 1 }),
      { move: false, reason: 'not_lifecycle' },
      null,
    ],
  ])('%s', (_name, event, expected, message) => {
    const input = lifecycleInput(event);
    expect(input).toMatchObject(expected);
    const log = lifecycleSkipLog(event, input);
    expect(log?.message ?? null).toBe(message);
    if (log !== null) expect(log.fields).toEqual({ event_id: 7, evento: event.evento });
  });
});

describe('registryResultEffects: a registry result or poll answer against the registration as loaded', () => {
  const NOW = Date.parse('2026-11-28T03:00:00.000Z');
  const SCHEDULE = { graceMs: 60_000, intervalMs: 30_000, maxIntervalMs: 600_000, maxAgeMs: 86_400_000 };
  const FIRST_POLL = '2026-11-28T03:01:00.000Z';
  const body = '{"requestId":"r1"}';
  const result = (status: unknown, over: Parameters<typeof facts>[0] = {}) =>
    facts({
      kind: 'registry',
      evento: null,
      requestId: 'r1',
      registryStatus: status as never,
      rawBody: body,
      ...over,
    });
  const tracked = (
    status: AverbacaoState['status'],
    correlation_id: string | null = 'c0',
  ): AverbacaoState => ({
    status,
    correlation_id,
    nu_proposta: 4242,
  });
  const setFinal = (
    status: 'completed' | 'error',
    source: 'webhook' | 'poll' = 'webhook',
  ): RegistryEffect => ({
    type: 'set_final',
    requestId: 'r1',
    status,
    source,
    body,
    eventId: 7,
  });
  const finalLog = (
    status: 'completed' | 'error',
    source: 'webhook' | 'poll' = 'webhook',
  ): RegistryEffect => ({
    type: 'log',
    level: status === 'error' ? 'warn' : 'info',
    fields: { request_id: 'r1', status, source, nu_proposta: 4242 },
    message:
      status === 'error'
        ? 'averbação ended in error (definitive failure, interface §3.2)'
        : 'averbação completed',
  });

  it.each<[string, ReturnType<typeof facts>, AverbacaoState | null, RegistryEffect[]]>([
    ['no requestId: nothing', result('completed', { requestId: null }), tracked('queued'), []],
    [
      'untracked, still processing: tracked from now on, first poll after the grace',
      result('processing', { nuProposta: 4242, dados: { correlationId: 'c9' } }),
      null,
      [
        {
          type: 'track',
          requestId: 'r1',
          correlationId: 'c9',
          nuProposta: 4242,
          status: 'processing',
          via: 'registry',
          nextPollAt: FIRST_POLL,
        },
      ],
    ],
    [
      'untracked, with an unknown status: tracked as queued',
      result('teleported'),
      null,
      [
        {
          type: 'track',
          requestId: 'r1',
          correlationId: null,
          nuProposta: null,
          status: 'queued',
          via: 'registry',
          nextPollAt: FIRST_POLL,
        },
      ],
    ],
    [
      'untracked, already completed: tracked never to be polled, and final',
      result('completed', { payload: { correlationId: 'top' }, dados: { correlationId: 'under' } }),
      null,
      [
        {
          type: 'track',
          requestId: 'r1',
          correlationId: 'top',
          nuProposta: null,
          status: 'completed',
          via: 'registry',
          nextPollAt: null,
        },
        setFinal('completed'),
      ],
    ],
    [
      'tracked, moving forward',
      result('processing'),
      tracked('queued'),
      [{ type: 'set_status', requestId: 'r1', status: 'processing' }],
    ],
    ['tracked, the same status: nothing', result('processing'), tracked('processing'), []],
    ['tracked, an older status: nothing', result('queued'), tracked('processing'), []],
    ['tracked and final: nothing after it', result('error'), tracked('completed'), []],
    [
      'tracked, an unknown status: kept, not applied, said',
      result('teleported'),
      tracked('processing'),
      [
        {
          type: 'log',
          level: 'warn',
          fields: { request_id: 'r1', status: 'teleported', event_id: 7 },
          message: 'registry result with an unknown status: kept, not applied',
        },
      ],
    ],
    [
      'completed by the webhook',
      result('completed'),
      tracked('processing'),
      [setFinal('completed'), finalLog('completed')],
    ],
    ['ended in error', result('error'), tracked('queued'), [setFinal('error'), finalLog('error')]],
    [
      'completed by a poll answer',
      result('completed', { kind: 'poll' }),
      tracked('processing'),
      [setFinal('completed', 'poll'), finalLog('completed', 'poll')],
    ],
    [
      'tracked without a correlationId: the first result that has one fills it',
      result('processing', { nuProposta: 4242, payload: { correlationId: 'c1' } }),
      tracked('queued', null),
      [
        { type: 'fill', requestId: 'r1', correlationId: 'c1', nuProposta: 4242 },
        { type: 'set_status', requestId: 'r1', status: 'processing' },
      ],
    ],
    [
      'a correlationId under dados fills it too',
      result('processing', { dados: { correlationId: 'c2' } }),
      tracked('processing', null),
      [{ type: 'fill', requestId: 'r1', correlationId: 'c2', nuProposta: null }],
    ],
    [
      'tracked with a correlationId: not filled again',
      result('processing', { payload: { correlationId: 'c1' } }),
      tracked('processing'),
      [],
    ],
    [
      'a blank correlationId fills nothing',
      result('processing', { payload: { correlationId: ' ' } }),
      tracked('processing', null),
      [],
    ],
  ])('%s', (_name, event, current, expected) => {
    expect(registryResultEffects(event, current, NOW, SCHEDULE)).toEqual(expected);
  });

  it.each([
    ['a registry result', result('completed')],
    ['a poll answer', result('completed', { kind: 'poll' })],
    ['an event without requestId', facts({ requestId: null })],
  ])('trackFromEventEffects ignores %s', (_name, event) => {
    expect(trackFromEventEffects(event, NOW, SCHEDULE)).toEqual([]);
  });

  // The event step skips a stage that works on no registration, and makes no span for it.
  it.each([
    ['registry_tracking', 'event', 'req-1', 'req-1'],
    ['registry_tracking', 'event', null, null],
    ['registry_tracking', 'registry', 'req-1', null],
    ['registry_tracking', 'poll', 'req-1', null],
    ['registry_results', 'registry', 'req-1', 'req-1'],
    ['registry_results', 'poll', 'req-1', 'req-1'],
    ['registry_results', 'registry', null, null],
    ['registry_results', 'event', 'req-1', 'req-1'],
  ] as const)('registrationOf(%s) of a %s with requestId %s: %s', (stage, kind, requestId, expected) => {
    expect(registrationOf(stage, { kind, requestId })).toBe(expected);
  });
});
