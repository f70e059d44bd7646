import {
  type Attributes,
  type Counter,
  createNoopMeter,
  diag,
  DiagLogLevel,
  type MeterProvider,
} from '@opentelemetry/api';
import { setGlobalErrorHandler } from '@opentelemetry/core';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtoExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, type BufferConfig } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import {
  ATTR_SERVICE_INSTANCE_ID,
  ATTR_SERVICE_NAME,
  ATTR_SERVICE_VERSION,
} from '@opentelemetry/semantic-conventions';
import { spanTraces } from './spans';
import type { TracingHooks, TracingSettings, TracingHandle } from './settings';

/**
 * The OpenTelemetry SDK, loaded only when OTEL_TRACES_EXPORTER=otlp (src/tracing/index.ts requires
 * this module then, and never otherwise). The SDK reads the standard variables itself:
 * OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS, _TIMEOUT, _COMPRESSION, OTEL_TRACES_SAMPLER(_ARG),
 * OTEL_BSP_*, OTEL_RESOURCE_ATTRIBUTES; the protocol and the service's name come from config.ts.
 *
 * The exporter never costs an answer: spans are queued by the BatchSpanProcessor (bounded,
 * OTEL_BSP_MAX_QUEUE_SIZE, 2048 by default) and sent from a timer; a collector that is down or slow
 * fills the queue, and what does not fit is dropped and counted (`consig_trace_spans_dropped_total`),
 * never waited for. The SDK's complaints go to the log at most once per {@link WARN_INTERVAL_MS}.
 */

/** At most one warning from the SDK (exporter errors, dropped spans) per interval. */
export const WARN_INTERVAL_MS = 60_000;

/** How long a stop waits for the spans still queued to be sent (docs/operating.md: "at most 2 s"). */
export const SHUTDOWN_FLUSH_MS = 2000;

/** The SDK's own counter of finished spans (semantic conventions' otel.sdk.processor.span.processed). */
const PROCESSED = 'otel.sdk.processor.span.processed';

export function startSdk(settings: TracingSettings, hooks: TracingHooks): TracingHandle {
  // The SDK's diagnostics and the failed exports (the global error handler) share one limit.
  const warn = rateLimited(hooks);
  diag.setLogger(rateLimitedDiag(warn), { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true });
  setGlobalErrorHandler((err) => warn('tracing: span export failed', String((err as Error)?.message ?? err)));
  const exporter = settings.protocol === 'http/json' ? new JsonExporter() : new ProtoExporter();
  // sdk-trace-base's BatchSpanProcessor reads OTEL_BSP_* and hands the rest of its options to
  // sdk-trace's, whose `selfObsMeterProvider` its type does not list yet.
  const options = { selfObsMeterProvider: droppedSpans(hooks) } as unknown as BufferConfig;
  const processor = new BatchSpanProcessor(exporter, options);
  const provider = new NodeTracerProvider({ resource: resourceOf(settings), spanProcessors: [processor] });
  // The W3C trace-context propagator and the AsyncLocalStorage context manager.
  provider.register();
  return {
    traces: spanTraces(provider.getTracer('consig-receiver', settings.serviceVersion)),
    shutdown: () => boundedShutdown(provider, hooks),
  };
}

/**
 * The provider's shutdown (the queued spans sent, the exporter stopped), bounded: a collector that
 * is down or does not answer must not hold the receiver's stop. When the bound cuts it short, the
 * log says so, once, outside the warnings' rate limit (it is the process's last word on its spans).
 */
async function boundedShutdown(provider: NodeTracerProvider, hooks: TracingHooks): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const flushed = provider.shutdown().then(
    () => 'flushed' as const,
    () => 'flushed' as const,
  );
  const bound = new Promise<'bound'>((resolve) => {
    timer = setTimeout(resolve, SHUTDOWN_FLUSH_MS, 'bound');
    timer.unref();
  });
  const outcome = await Promise.race([flushed, bound]);
  clearTimeout(timer);
  if (outcome === 'bound')
    hooks.warn(
      { timeout_ms: SHUTDOWN_FLUSH_MS },
      'tracing: the stop did not wait longer for the collector; spans not yet exported are dropped',
    );
}

/** service.name (OTEL_SERVICE_NAME), service.version, the replica (cluster mode), OTEL_RESOURCE_ATTRIBUTES. */
function resourceOf(settings: TracingSettings) {
  const ours = resourceFromAttributes({
    [ATTR_SERVICE_VERSION]: settings.serviceVersion,
    ...(settings.replicaId === null
      ? {}
      : { [ATTR_SERVICE_INSTANCE_ID]: settings.replicaId, 'consig.replica_id': settings.replicaId }),
  });
  // OTEL_RESOURCE_ATTRIBUTES may name other attributes; the service's name is config's (which reads
  // OTEL_SERVICE_NAME, with its default).
  return detectResources({ detectors: [envDetector] })
    .merge(ours)
    .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: settings.serviceName }));
}

/** A warning at most once per interval; the ones in between are counted in the next. */
function rateLimited(hooks: TracingHooks): (message: string, detail: string) => void {
  let last = -Infinity;
  let quiet = 0;
  return (message, detail) => {
    const now = hooks.monotonic();
    if (now - last < WARN_INTERVAL_MS) {
      quiet += 1;
      return;
    }
    last = now;
    hooks.warn({ detail: detail.slice(0, 300), suppressed: quiet }, message);
    quiet = 0;
  };
}

/** The SDK's diagnostics: warnings and errors only, rate-limited. */
function rateLimitedDiag(warn: (message: string, detail: string) => void) {
  const say = (message: string, ...args: unknown[]) =>
    warn('tracing: the OpenTelemetry SDK complained', [message, ...args.map(String)].join(' '));
  const quiet = () => undefined;
  return { error: say, warn: say, info: quiet, debug: quiet, verbose: quiet };
}

/**
 * The BatchSpanProcessor's self-observability, read for one thing: the spans it finished with an
 * error (queue_full: the queue was full; another error.type: the export failed), counted in the
 * receiver's metric. Every other instrument is a no-op.
 */
function droppedSpans(hooks: TracingHooks): MeterProvider {
  const noop = createNoopMeter();
  const counter: Counter = {
    add(value: number, attributes?: Attributes) {
      const error = attributes?.['error.type'];
      if (error === undefined) return;
      hooks.dropped(error === 'queue_full' ? 'queue_full' : 'export_failed', value);
    },
  };
  const meter = Object.create(noop) as typeof noop;
  meter.createCounter = ((name: string) =>
    name === PROCESSED ? counter : noop.createCounter(name)) as typeof noop.createCounter;
  return { getMeter: () => meter };
}
