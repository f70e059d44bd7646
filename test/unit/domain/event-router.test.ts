import {
  type EventRowForHandlers,
  type HandlerEvent,
  handlerEventOf,
  Router,
  routeName,
} from '../../../src/domain/event-router';

/**
 * What a handler sees of a stored event (both stores read the same row), the routing name, and
 * whether a router has anything to run. Routing order and error handlers: test/unit/router.test.ts.
 */

const row = (body: EventRowForHandlers['body']): EventRowForHandlers => ({
  id: 7,
  kind: 'event',
  evento: 'proposta.criada',
  nu_proposta: 4242,
  request_id: 'req-7',
  registry_status: null,
  webhook_id: 'wh-7',
  dedup_key: 'wh-7',
  tentativa: 2,
  received_at: '2026-11-26T12:00:00.000Z',
  attempts: 1,
  body,
});

const JSON_BODY = '{"evento":"proposta.criada","dados":{"nu_proposta":4242}}';

describe('handlerEventOf: the body parsed once, never throwing', () => {
  it.each<[string, EventRowForHandlers['body'], Pick<HandlerEvent, 'rawBody' | 'payload' | 'dados'>]>([
    [
      'text (SQLite)',
      JSON_BODY,
      { rawBody: JSON_BODY, payload: JSON.parse(JSON_BODY), dados: { nu_proposta: 4242 } },
    ],
    [
      'bytes (PostgreSQL bytea), decoded as UTF-8',
      new TextEncoder().encode('{"dados":{"no":"São Paulo"}}'),
      {
        rawBody: '{"dados":{"no":"São Paulo"}}',
        payload: { dados: { no: 'São Paulo' } },
        dados: { no: 'São Paulo' },
      },
    ],
    ['pruned (null): no body, no payload', null, { rawBody: null, payload: undefined, dados: undefined }],
    ['text that does not parse', '{"dados":', { rawBody: '{"dados":', payload: undefined, dados: undefined }],
    [
      'a payload without dados',
      '{"evento":"x"}',
      { rawBody: '{"evento":"x"}', payload: { evento: 'x' }, dados: undefined },
    ],
    [
      'dados that is not an object is kept as it is',
      '{"dados":0}',
      { rawBody: '{"dados":0}', payload: { dados: 0 }, dados: 0 },
    ],
  ])('%s', (_name, body, expected) => {
    const event = handlerEventOf(row(body));
    expect({ rawBody: event.rawBody, payload: event.payload, dados: event.dados }).toStrictEqual(expected);
  });

  it('carries every column under its camel-case name', () => {
    expect(handlerEventOf(row(JSON_BODY))).toStrictEqual({
      id: 7,
      kind: 'event',
      evento: 'proposta.criada',
      nuProposta: 4242,
      requestId: 'req-7',
      registryStatus: null,
      webhookId: 'wh-7',
      dedupKey: 'wh-7',
      tentativa: 2,
      receivedAt: '2026-11-26T12:00:00.000Z',
      attempts: 1,
      rawBody: JSON_BODY,
      payload: JSON.parse(JSON_BODY),
      dados: { nu_proposta: 4242 },
    });
  });
});

describe('routeName', () => {
  it.each<[Pick<HandlerEvent, 'kind' | 'evento'>, string]>([
    [{ kind: 'event', evento: 'proposta.criada' }, 'proposta.criada'],
    [{ kind: 'event', evento: null }, ''], // an event without a name reaches onAny alone
    [{ kind: 'registry', evento: null }, 'registry'],
    [{ kind: 'poll', evento: null }, 'registry'],
  ])('%p → %p', (event, expected) => {
    expect(routeName(event)).toBe(expected);
  });
});

describe('Router.empty: whether any handler would run for some event', () => {
  type Handler = () => void;
  const noop: Handler = () => undefined;
  it.each<[string, boolean, (r: Router<Handler>) => Router<Handler>]>([
    ['nothing registered', true, (r) => r],
    ['a named handler', false, (r) => r.on('proposta.criada', noop)],
    ['an onAny handler', false, (r) => r.onAny(noop)],
    ['both', false, (r) => r.on('registry', noop).onAny(noop)],
    ['an error handler alone runs for no event', true, (r) => r.onError(noop)],
    ['no names at all registers nothing', true, (r) => r.on([], noop)],
  ])('%s → %p', (_name, expected, register) => {
    expect(register(new Router<Handler>()).empty).toBe(expected);
  });
});
