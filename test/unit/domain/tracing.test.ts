import { processingAttributes, processingName, tracedStage } from '../../../src/domain/tracing';

/** What a processing span says of its event (src/tracing/ implements the spans themselves). */

const event: Parameters<typeof processingAttributes>[0] = {
  id: 7,
  kind: 'event',
  evento: 'proposta.criada',
  nuProposta: 4242,
  requestId: 'req-7',
  webhookId: 'wh-7',
  attempts: 0,
};

describe('processingAttributes: the event, never its payload', () => {
  it('a first attempt starting a trace of its own: every attribute, the proposal as text, attempt 1', () => {
    expect(processingAttributes(event, false)).toStrictEqual({
      'consig.event_id': 7,
      'consig.kind': 'event',
      'consig.evento': 'proposta.criada',
      'consig.nu_proposta': '4242',
      'consig.request_id': 'req-7',
      'consig.webhook_id': 'wh-7',
      'consig.attempt': 1,
    });
  });

  it.each<[string, Partial<typeof event>, Record<string, unknown>]>([
    ['no proposal: null, not "null"', { nuProposta: null }, { 'consig.nu_proposta': null }],
    ['a proposal kept as text', { nuProposta: 'ABC-9' }, { 'consig.nu_proposta': 'ABC-9' }],
    ['proposal 0 is a proposal', { nuProposta: 0 }, { 'consig.nu_proposta': '0' }],
    ['a retry after two failures is attempt 3', { attempts: 2 }, { 'consig.attempt': 3 }],
    [
      'a registry result: no evento, no webhook id',
      { kind: 'registry', evento: null, webhookId: null, requestId: 'req-9' },
      {
        'consig.kind': 'registry',
        'consig.evento': null,
        'consig.webhook_id': null,
        'consig.request_id': 'req-9',
      },
    ],
  ])('%s', (_name, over, expected) => {
    expect(processingAttributes({ ...event, ...over }, false)).toMatchObject(expected);
  });

  it.each([
    ['a first attempt', 0, 1],
    ['a retry after two failures', 2, 3],
  ])("continuing the delivery's trace, %s: the event id and the attempt only", (_name, attempts, attempt) => {
    expect(processingAttributes({ ...event, attempts }, true)).toStrictEqual({
      'consig.event_id': 7,
      'consig.attempt': attempt,
    });
  });

  it.each([
    ['an event: its evento', { kind: 'event', evento: 'proposta.criada' }, 'process proposta.criada'],
    ['a registry result: its kind', { kind: 'registry', evento: null }, 'process registry'],
    ['a poll answer: its kind', { kind: 'poll', evento: null }, 'process poll'],
  ])('processingName, %s', (_name, e, expected) => {
    expect(processingName(e)).toBe(expected);
  });
});

describe('tracedStage', () => {
  const handler = (a: number, b: number) => a + b;

  it('tracing off: the handler itself', () => {
    expect(tracedStage(undefined, 'built-in', handler)).toBe(handler);
  });
});
