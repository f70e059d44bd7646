import { lifecycleInput, lifecycleSkipLog } from '../../../src/domain/event-effects';
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
