import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import {
  AlwaysOffSampler,
  InMemorySpanExporter,
  ParentBasedSampler,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { processingAttributes, processingName, tracedStage } from '../../src/domain/tracing';
import { createLogger } from '../../src/logger';
import { spanTraces } from '../../src/tracing/spans';

/**
 * The seams' spans (src/tracing/spans.ts) on the real SDK, exported to its in-memory exporter: how a
 * context is stored with an event and continued from it, how a stage nests, what an outgoing
 * request's headers say, and what a failure leaves in a span (its class, never its message: a
 * handler's message may quote the payload). The trace across processes is test/e2e/tracing.test.ts.
 */

const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
provider.register(); // the AsyncLocalStorage context manager, as the receiver's
const traces = spanTraces(provider.getTracer('test'));

afterEach(() => exporter.reset());
afterAll(() => provider.shutdown());

const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

it('a request continues the service’s traceparent; its stored context is its own span, tracestate kept', () => {
  const request = traces.request('/webhooks', TRACEPARENT, 'vendor=abc');
  expect(request.stored).toMatch(/^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01 vendor=abc$/);
  request.end('accepted', 200, { 'consig.evento': 'proposta.aprovada', 'consig.request_id': null });
  const [span] = exporter.getFinishedSpans();
  expect(span?.kind).toBe(SpanKind.SERVER);
  expect(span?.parentSpanContext?.spanId).toBe('b7ad6b7169203331');
  expect(request.stored?.split('-')[2]).toBe(span?.spanContext().spanId);
  // null attributes are left out, not sent as null.
  expect(span?.attributes).toEqual({
    'http.request.method': 'POST',
    'http.route': '/webhooks',
    'consig.evento': 'proposta.aprovada',
    'consig.outcome': 'accepted',
    'http.response.status_code': 200,
  });
});

it('a request’s log ids name its span', () => {
  const request = traces.request('/webhooks', TRACEPARENT, undefined);
  request.end('accepted', 200);
  const [span] = exporter.getFinishedSpans();
  expect(request.logIds).toEqual({
    trace_id: '0af7651916cd43dd8448eb211c80319c',
    span_id: span?.spanContext().spanId,
  });
});

it('a log line written in a span carries its ids (its own fields first); outside, it is as written', () => {
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger('info', { write: (l: string) => void lines.push(JSON.parse(l)) } as never, {
    traceIds: true,
  });
  const line = { evento: 'proposta.aprovada' };
  logger.info(line, 'outside');
  traces.processing(TRACEPARENT, 'process proposta.aprovada', {}, () => {
    logger.info(line, 'inside');
    logger.info({ trace_id: 'its own' }, 'its own ids');
  });
  logger.info(line, 'outside again');
  const [processing] = exporter.getFinishedSpans();
  const ids = { trace_id: '0af7651916cd43dd8448eb211c80319c', span_id: processing?.spanContext().spanId };
  expect(lines.map((l) => [l.msg, l.trace_id, l.span_id])).toEqual([
    ['outside', undefined, undefined],
    ['inside', ids.trace_id, ids.span_id],
    ['its own ids', 'its own', ids.span_id],
    ['outside again', undefined, undefined],
  ]);
  expect(line).toEqual({ evento: 'proposta.aprovada' }); // the caller's object is left alone
});

it('a request without traceparent, or with an unreadable one, starts a trace of its own', () => {
  for (const parent of [undefined, 'not-a-traceparent']) {
    const request = traces.request('/webhooks', parent, undefined);
    request.end('invalid_signature', 401);
  }
  for (const span of exporter.getFinishedSpans()) {
    expect(span.parentSpanContext).toBeUndefined();
    expect(span.status.code).toBe(SpanStatusCode.UNSET); // a 4xx is the answer asked for
  }
});

it('processing continues a stored context, stages nest under it, an outbox message stores the stage’s', async () => {
  const request = traces.request('/webhooks', TRACEPARENT, undefined);
  request.end('accepted', 200);
  const event = {
    id: 7,
    kind: 'event',
    evento: 'proposta.aprovada',
    nuProposta: 910001,
    requestId: null,
    webhookId: 'wh_1',
    attempts: 0,
  };
  let stored: string | null = null;
  const stage = tracedStage(traces, 'forwarding', async (x: number) => {
    await new Promise((resolve) => setImmediate(resolve));
    stored = traces.current();
    return x + 1;
  });
  const result = await traces.processing(
    request.stored,
    processingName(event),
    processingAttributes(event, true),
    () => stage(1),
  );
  expect(result).toBe(2);
  const [, stageSpan, processing] = exporter.getFinishedSpans();
  expect(processing?.name).toBe('process proposta.aprovada');
  expect(processing?.parentSpanContext?.spanId).toBe(request.stored?.split('-')[2]);
  // Its parent, the delivery's span, says what the delivery was: the processing, what is its own.
  expect(processing?.attributes).toEqual({ 'consig.event_id': 7, 'consig.attempt': 1 });
  expect(stageSpan?.parentSpanContext?.spanId).toBe(processing?.spanContext().spanId);
  expect(stored).toBe(`00-0af7651916cd43dd8448eb211c80319c-${stageSpan?.spanContext().spanId}-01`);
});

it('an outgoing request names its own span in traceparent, under a stored parent or the active span', () => {
  const attempt = traces.outgoing('POST lender', { 'consig.attempt': 2 }, TRACEPARENT);
  attempt.end('temporary', 503, true);
  const root = traces.outgoing('GET /request/:requestId', {}, null);
  root.end('ok', 200, false);
  const [a, r] = exporter.getFinishedSpans();
  expect(a?.kind).toBe(SpanKind.CLIENT);
  expect(attempt.headers).toEqual({
    traceparent: `00-0af7651916cd43dd8448eb211c80319c-${a?.spanContext().spanId}-01`,
  });
  expect(a?.parentSpanContext?.spanId).toBe('b7ad6b7169203331');
  expect(a?.status.code).toBe(SpanStatusCode.ERROR);
  expect(a?.attributes).toMatchObject({ 'consig.outcome': 'temporary', 'http.response.status_code': 503 });
  expect(r?.parentSpanContext).toBeUndefined();
});

it('a failure marks the span with its class only, never its message, and is thrown on (sync and async)', async () => {
  const cpf = '12345678909';
  expect(() =>
    traces.processing(null, 'process event', {}, () => {
      throw new TypeError(`bad cpf ${cpf}`);
    }),
  ).toThrow(TypeError);
  await expect(
    traces.processing(null, 'process event', {}, async () => {
      throw new RangeError(`bad cpf ${cpf}`);
    }),
  ).rejects.toThrow(RangeError);
  const spans = exporter.getFinishedSpans();
  expect(spans.map((s) => s.attributes['error.type'])).toEqual(['TypeError', 'RangeError']);
  for (const s of spans) {
    expect(s.status).toEqual({ code: SpanStatusCode.ERROR });
    expect(JSON.stringify([s.attributes, s.events, s.status])).not.toContain(cpf);
  }
});

it('an unsampled request stores its context all the same, so its processing and calls stay unsampled', async () => {
  // OTEL_TRACES_SAMPLER=parentbased_always_off: a request without traceparent is not sampled.
  const unsampled = new NodeTracerProvider({
    sampler: new ParentBasedSampler({ root: new AlwaysOffSampler() }),
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  });
  const off = spanTraces(unsampled.getTracer('test'));
  const request = off.request('/webhooks', undefined, undefined);
  request.end('accepted', 200);
  expect(request.stored).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
  const traceId = request.stored.split('-')[1];
  // Later, from the stored text: the same trace, still unsampled; nothing exported.
  const headers = off.processing(request.stored, 'process proposta.aprovada', {}, () =>
    off.stage('forwarding', () => off.outgoing('POST default', {}).headers),
  );
  expect(headers.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-00$`));
  expect(exporter.getFinishedSpans()).toEqual([]);
  await unsampled.shutdown();
});

it('off, a stage is the handler itself', () => {
  const handler = (x: number) => x;
  expect(tracedStage(undefined, 'lifecycle', handler)).toBe(handler);
});
