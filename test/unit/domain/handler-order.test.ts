import { join } from 'node:path';

import { EVENTOS } from '../../../src/domain/catalogue';
import { Router } from '../../../src/domain/event-router';
import * as HandlerOrder from '../../../src/domain/handler-order';
import { loadAgainInEachTest } from './fresh-module';

// Loaded again in each test, so that Stryker runs these tests against its module-level tables and
// patterns too (fresh-module.ts).
loadAgainInEachTest(HandlerOrder, join(__dirname, '../../../src/domain/handler-order'));
const { registerInOrder, stagesFor } = HandlerOrder;

describe('the order of handlers, stated once for both modes', () => {
  it.each([
    [
      { kind: 'event', evento: 'proposta.criada' },
      ['lifecycle', 'registry_tracking', 'partner', 'forwarding'],
    ],
    [
      { kind: 'event', evento: 'averbacao.solicitada' },
      ['lifecycle', 'registry_tracking', 'partner', 'forwarding'],
    ],
    [{ kind: 'event', evento: 'evento.desconhecido' }, ['partner', 'forwarding']],
    [{ kind: 'registry', evento: null }, ['registry_results', 'partner', 'forwarding']],
    [{ kind: 'poll', evento: null }, ['registry_results', 'partner', 'forwarding']],
  ] as const)('%p → %p', (event, stages) => {
    expect(stagesFor(event)).toEqual(stages);
  });

  it("SQLite mode's router runs them in that order, the partner's named and onAny handlers before forwarding", () => {
    const router = registerInOrder(new Router<string>(), {
      lifecycle: 'lifecycle',
      registry_tracking: 'registry_tracking',
      registry_results: 'registry_results',
      partner: (r) => r.onAny('partner_any').on('proposta.criada', 'partner_named'),
      forwarding: 'forwarding',
    });
    expect(router.handlersFor({ kind: 'event', evento: EVENTOS[0]! })).toEqual([
      'lifecycle',
      'registry_tracking',
      'partner_named',
      'partner_any',
      'forwarding',
    ]);
    expect(router.handlersFor({ kind: 'registry', evento: null })).toEqual([
      'registry_results',
      'partner_any',
      'forwarding',
    ]);
  });
});
