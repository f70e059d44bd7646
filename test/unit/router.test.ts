import { type HandlerEvent, Router, routeName } from '../../src/domain/event-router';

type Handler = (event: HandlerEvent) => unknown;

const ev = (over: Partial<HandlerEvent>): HandlerEvent => ({
  id: 1,
  kind: 'event',
  evento: 'proposta.aprovada',
  nuProposta: 1,
  requestId: null,
  registryStatus: null,
  dedupKey: 'wh_1',
  webhookId: null,
  tentativa: 1,
  receivedAt: '',
  attempts: 0,
  rawBody: null,
  payload: {},
  dados: {},
  ...over,
});

describe('Router', () => {
  it('routes by name, then onAny, in registration order', () => {
    const calls: string[] = [];
    const router = new Router<Handler>()
      .onAny(() => calls.push('any'))
      .on('proposta.aprovada', () => calls.push('a1'))
      .on(['proposta.aprovada', 'proposta.negada'], () => calls.push('a2'))
      .on('registry', () => calls.push('registry'));
    for (const h of router.handlersFor(ev({}))) h(ev({}));
    expect(calls).toEqual(['a1', 'a2', 'any']);
    expect(router.handlersFor(ev({ kind: 'registry', evento: null }))).toHaveLength(2);
    expect(router.handlersFor(ev({ evento: 'proposta.negada' }))).toHaveLength(2);
    expect(router.handlersFor(ev({ evento: 'outro' }))).toHaveLength(1);
  });

  it('onError handlers that throw do not propagate', () => {
    const seen: string[] = [];
    const router = new Router<Handler>()
      .onError(() => {
        throw new Error('bad error handler');
      })
      .onError((e) => seen.push(e.message));
    expect(() => router.emitError(new Error('boom'), ev({}))).not.toThrow();
    expect(seen).toEqual(['boom']);
  });

  it('names registry results and polls "registry"', () => {
    expect(routeName({ kind: 'registry', evento: null })).toBe('registry');
    expect(routeName({ kind: 'poll', evento: null })).toBe('registry');
    expect(routeName({ kind: 'event', evento: 'x' })).toBe('x');
  });
});
