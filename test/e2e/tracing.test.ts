import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { FakeDestination } from '../helpers/destination';
import {
  type CollectedSpan,
  deliveryTrace,
  describeTrace,
  OtlpCollector,
  SPAN_KIND,
} from '../helpers/otlp-collector';
import { SHUTDOWN_FLUSH_MS, WARN_INTERVAL_MS } from '../../src/tracing/sdk';
import { delivery, postRaw, SECRET, signed } from '../helpers/payloads';
import { type ServerProcess, serveOnOneFile } from '../helpers/process';
import { eventually } from '../helpers/receiver';

/**
 * Tracing in SQLite mode (issue 35), on a real `serve` process exporting to a real OTLP/HTTP
 * endpoint on loopback (test/helpers/otlp-collector.ts decodes what the SDK's exporter sent, as
 * JSON or protobuf): one trace from the service's `traceparent` through the answer, the processing
 * and its stages, to the forwarded requests' `traceparent`; the resource; the outcomes; log lines
 * that carry the ids; no CPF, secret or signature in any span; a collector that takes no export
 * delays no answer and floods nothing; a stop sends what is queued, and gives up on a collector that
 * does not take it at its bound; and with tracing off, nothing is exported and nothing is added.
 * What tracing costs is measured by the bench (`receiver-traced`, docs/benchmark.md), not here.
 */

const files = serveOnOneFile();
const FORWARD_SECRET = `whsec_${Buffer.from('tracing-test-lender-secret-01234').toString('base64')}`;
const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const PARENT_ID = 'b7ad6b7169203331';
const TRACEPARENT = `00-${TRACE_ID}-${PARENT_ID}-01`;
const CPF = '12345678909';
const VERSION = (
  JSON.parse(readFileSync(join(__dirname, '../../package.json'), 'utf8')) as { version: string }
).version;

let collector: OtlpCollector;
let destination: FakeDestination;
beforeEach(async () => {
  collector = await new OtlpCollector().start();
  destination = await FakeDestination.start();
});
afterEach(async () => {
  await collector.stop();
  await destination.close();
});

function tracingEnv(extra: Record<string, string> = {}): Record<string, string> {
  return {
    OTEL_TRACES_EXPORTER: 'otlp',
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
    // Spans leave within 100 ms of ending (the default waits 5 s).
    OTEL_BSP_SCHEDULE_DELAY: '100',
    ...extra,
  };
}

async function send(s: ServerProcess, body: unknown, headers: Record<string, string> = {}) {
  const { raw, signature } = signed(body);
  return postRaw(`${s.url}/webhooks`, raw, {
    'content-type': 'application/json',
    'x-service-signature': signature,
    ...headers,
  });
}

const traceparents = (d: FakeDestination) => d.requests.map((r) => String(r.headers.traceparent));

/** No attribute of any span, nor its resource, holds a CPF in full, a secret or a signature. */
function expectNothingPersonal(spans: readonly CollectedSpan[], signatures: readonly string[]): void {
  const text = JSON.stringify(spans.map((s) => [s.name, s.attributes, s.resource]));
  for (const secret of [CPF, SECRET, FORWARD_SECRET, ...signatures]) expect(text).not.toContain(secret);
}

it('one trace from the service’s traceparent to the forwarded requests’ traceparent, over http/json', async () => {
  const s = await files.serve({
    ...tracingEnv({ OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }),
    FORWARD_URL: destination.url,
    FORWARD_SECRET,
  });
  const body = delivery('proposta.aprovada', { nu_proposta: 910001 });
  const answer = await send(s, body, { traceparent: TRACEPARENT, tracestate: 'vendor=abc' });
  expect(answer.status).toBe(200);
  // event.received and proposal.changed, each forwarded once.
  await eventually(() => destination.requests.length >= 2, 'both messages forwarded');
  await eventually(
    () => collector.trace(TRACE_ID).filter((x) => x.kind === SPAN_KIND.client).length >= 2,
    'the attempts’ spans exported',
  );

  const trace = deliveryTrace(collector, TRACE_ID, PARENT_ID, traceparents(destination));
  expect(trace.server.attributes).toMatchObject({
    'http.route': '/webhooks',
    'http.response.status_code': 200,
    'consig.outcome': 'accepted',
    'consig.evento': 'proposta.aprovada',
    'consig.nu_proposta': '910001',
    'consig.event_id': answer.body.event_id,
    'consig.webhook_id': (body.metadata as { webhook_id: string }).webhook_id,
  });
  expect(trace.processing).toMatchObject({
    name: 'process proposta.aprovada',
    attributes: expect.objectContaining({ 'consig.event_id': answer.body.event_id, 'consig.attempt': 1 }),
  });
  for (const a of trace.attempts)
    expect(a.attributes).toMatchObject({
      'consig.destination': 'default',
      'consig.attempt': 1,
      'consig.outcome': 'delivered',
      'http.response.status_code': 200,
    });
  // The service's tracestate is kept along the trace, to the lender's requests.
  for (const r of destination.requests) expect(r.headers.tracestate).toBe('vendor=abc');
  expect(trace.server.resource).toMatchObject({
    'service.name': 'consig-receiver',
    'service.version': VERSION,
  });

  // The answer's log line carries the request's span.
  const line = s
    .output()
    .split('\n')
    .find((l) => l.includes('"msg":"delivery"'));
  expect(JSON.parse(line ?? '{}')).toMatchObject({ trace_id: TRACE_ID, span_id: trace.server.spanId });

  // The other outcomes: a duplicate, a bad signature (each a trace of its own: no traceparent).
  expect((await send(s, body)).status).toBe(200);
  const { raw } = signed(body);
  const bad = await postRaw(`${s.url}/webhooks`, raw, {
    'content-type': 'application/json',
    'x-service-signature': `sha256=${'0'.repeat(64)}`,
  });
  expect(bad.status).toBe(401);
  await eventually(
    () => collector.spans.filter((x) => x.kind === SPAN_KIND.server).length >= 3,
    'three answers’ spans',
  );
  const outcomes = collector.spans
    .filter((x) => x.kind === SPAN_KIND.server)
    .map((x) => [x.attributes['consig.outcome'], x.attributes['http.response.status_code']]);
  expect(outcomes).toEqual([
    ['accepted', 200],
    ['duplicate', 200],
    ['invalid_signature', 401],
  ]);
  expectNothingPersonal(collector.spans, [signed(body).signature]);
  expect(collector.contentTypes.every((t) => t.startsWith('application/json'))).toBe(true);
  process.stdout.write(`${describeTrace(collector.trace(TRACE_ID))}\n`);
}, 60_000);

it('http/protobuf by default, with OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES on the resource', async () => {
  const s = await files.serve(
    tracingEnv({
      OTEL_SERVICE_NAME: 'lender-receiver',
      OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=test',
    }),
  );
  expect((await send(s, delivery('proposta.aprovada'), { traceparent: TRACEPARENT })).status).toBe(200);
  await eventually(
    () => collector.trace(TRACE_ID).some((x) => x.kind === SPAN_KIND.consumer),
    'the processing span exported',
  );
  expect(collector.contentTypes.length).toBeGreaterThan(0);
  expect(collector.contentTypes.every((t) => t === 'application/x-protobuf')).toBe(true);
  const server = collector.trace(TRACE_ID).find((x) => x.kind === SPAN_KIND.server);
  const processing = collector.trace(TRACE_ID).find((x) => x.kind === SPAN_KIND.consumer);
  expect(server).toMatchObject({
    parentSpanId: PARENT_ID,
    attributes: expect.objectContaining({ 'consig.outcome': 'accepted', 'http.response.status_code': 200 }),
    resource: expect.objectContaining({
      'service.name': 'lender-receiver',
      'service.version': VERSION,
      'deployment.environment.name': 'test',
    }),
  });
  expect(processing?.parentSpanId).toBe(server?.spanId);
  expect(processing && processing.endNs >= processing.startNs).toBe(true);
}, 60_000);

/** Polls `probe` until it is true (a bound for a hung test, not a performance threshold). */
async function waitFor(probe: () => Promise<boolean>, what: string, timeoutMs = 30_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > until) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** `consig_trace_spans_dropped_total{reason}` as /metrics shows it (0 when absent). */
async function dropped(s: ServerProcess, reason: string): Promise<number> {
  const text = await (await fetch(`${s.url}/metrics`)).text();
  const match = new RegExp(`^consig_trace_spans_dropped_total\\{reason="${reason}"\\} (\\d+)`, 'm').exec(
    text,
  );
  return Number(match?.[1] ?? 0);
}

/** The process's log lines whose message is one of `messages`. */
function logLines(s: ServerProcess, messages: readonly string[]): Record<string, unknown>[] {
  return s
    .output()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => messages.includes(String(l.msg)));
}

/** What the SDK's complaints are logged as, rate-limited (src/tracing/sdk.ts). */
const SDK_WARNINGS = ['tracing: span export failed', 'tracing: the OpenTelemetry SDK complained'];
/** Logged once when a stop's flush is cut at its bound (SHUTDOWN_FLUSH_MS). */
const STOP_BOUND =
  'tracing: the stop did not wait longer for the collector; spans not yet exported are dropped';

it('a collector that takes no export (never answers): every delivery still answered, spans beyond the queue dropped and counted, failed exports counted, one warning a minute at most, and the stop cut at its flush bound with exit code 0', async () => {
  // The collector reads each export and never answers, so each export holds its batch (4 spans)
  // until the exporter's timeout (5 s), while each delivery adds at least its SERVER span: the queue
  // (8) overflows by counting, not by speed, unless the 40 deliveries took more than 7 timeouts.
  collector.mode = 'hold';
  const started = Date.now();
  const s = await files.serve({
    ...tracingEnv({
      OTEL_EXPORTER_OTLP_TIMEOUT: '5000',
      OTEL_BSP_MAX_QUEUE_SIZE: '8',
      OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '4',
    }),
  });
  for (let i = 0; i < 40; i++) expect((await send(s, delivery('proposta.aprovada'))).status).toBe(200);
  await waitFor(async () => (await dropped(s, 'queue_full')) > 0, 'spans dropped from the full queue');
  // The first export times out and fails: its spans are counted too.
  await waitFor(async () => (await dropped(s, 'export_failed')) > 0, 'failed exports counted');
  // Still answering, after the failures.
  expect((await send(s, delivery('proposta.aprovada'))).status).toBe(200);
  expect(collector.held).toBeGreaterThan(0);
  expect(collector.spans).toEqual([]);

  // The stop's flush sends the queue to the same collector, which holds it: each of those exports
  // would wait its 5 s; the stop does not, it gives up at its bound, says so, and exits 0.
  s.child.kill('SIGTERM');
  expect((await s.exited).code).toBe(0);
  const lifetime = Date.now() - started;
  expect(logLines(s, [STOP_BOUND])).toEqual([expect.objectContaining({ timeout_ms: SHUTDOWN_FLUSH_MS })]);
  // The SDK's complaints (a failed export, dropped spans) reached the log, and at most once per
  // WARN_INTERVAL_MS of the process's life (which the test's count outlasts).
  const warnings = logLines(s, SDK_WARNINGS);
  expect(warnings.length).toBeGreaterThanOrEqual(1);
  expect(warnings.length).toBeLessThanOrEqual(1 + Math.floor(lifetime / WARN_INTERVAL_MS));
}, 120_000);

it('a stop sends the spans still queued to a collector that takes them, before their schedule, and is not cut at its bound', async () => {
  // A schedule far beyond the test: only the stop's flush can send the spans.
  const s = await files.serve(tracingEnv({ OTEL_BSP_SCHEDULE_DELAY: '600000' }));
  expect((await send(s, delivery('proposta.aprovada'), { traceparent: TRACEPARENT })).status).toBe(200);
  expect(collector.contentTypes).toEqual([]);
  s.child.kill('SIGTERM');
  expect((await s.exited).code).toBe(0);
  expect(collector.trace(TRACE_ID).filter((x) => x.kind === SPAN_KIND.server)).toHaveLength(1);
  expect(logLines(s, [STOP_BOUND])).toEqual([]);
  expect(logLines(s, SDK_WARNINGS)).toEqual([]);
}, 60_000);

it('off by default: nothing exported, no traceparent forwarded, no ids in the log', async () => {
  const s = await files.serve({
    // Everything but the switch: the endpoint alone turns nothing on.
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
    OTEL_BSP_SCHEDULE_DELAY: '100',
    FORWARD_URL: destination.url,
    FORWARD_SECRET,
  });
  expect((await send(s, delivery('proposta.aprovada'), { traceparent: TRACEPARENT })).status).toBe(200);
  await eventually(() => destination.requests.length >= 2, 'both messages forwarded');
  for (const r of destination.requests) expect(r.headers.traceparent).toBeUndefined();
  expect(s.output()).not.toContain('"trace_id"');
  // A stop flushes whatever an exporter would hold: there was none.
  s.child.kill('SIGTERM');
  expect((await s.exited).code).toBe(0);
  expect(collector.contentTypes).toEqual([]);
}, 60_000);
