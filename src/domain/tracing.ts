/**
 * What the receiver's seams ask of tracing (issue 35; docs/operating.md "Tracing"): the webhook
 * request, the processing of a stored event and its stages, and every outgoing request (a call to
 * the service, a forwarding attempt). Types only: src/tracing/ implements them on the OpenTelemetry
 * SDK when OTEL_TRACES_EXPORTER=otlp, and each seam holds `Traces | undefined`, undefined when
 * tracing is off, so that the answer's path pays one comparison and nothing more.
 *
 * A trace context crosses the database as text: the W3C `traceparent`, then a space and the
 * `tracestate` when there is one (`events.trace_context`, `forward_messages.trace_context`).
 */

/** Span attributes the seams set: never a full CPF, a secret, a token or a signature. */
export type TraceAttributes = Readonly<Record<string, string | number | boolean | null | undefined>>;

/** The SERVER span of one webhook request. */
export interface RequestTrace {
  /**
   * The request's context as stored with its event; an unsampled request's too (its flags `00`), so
   * that its processing is not sampled either (OTEL_TRACES_SAMPLER's parent-based samplers).
   */
  readonly stored: string;
  /**
   * The span's ids, for the request's log line to carry (`trace_id`, `span_id`): the line is
   * written after the answer, outside the span, with these among its fields.
   */
  readonly logIds: Readonly<{ trace_id: string; span_id: string }>;
  /** Ends the span with the answer's outcome and status, and what the delivery was. */
  end(outcome: string, httpStatus: number, attributes?: TraceAttributes): void;
}

/** The CLIENT span of one outgoing request. */
export interface OutgoingTrace {
  /** `traceparent` (and `tracestate`) naming this span, for the request's headers. */
  readonly headers: Readonly<Record<string, string>>;
  /** Runs `fn` with the span active: log lines written in it carry its ids. */
  run<T>(fn: () => T): T;
  /** Ends the span: `failed` marks it as an error. */
  end(outcome: string, httpStatus: number | null, failed: boolean, attributes?: TraceAttributes): void;
}

export interface Traces {
  /** A SERVER span for a webhook request, continuing the service's `traceparent` when it sent one. */
  request(route: string, traceparent: string | undefined, tracestate: string | undefined): RequestTrace;
  /**
   * Runs `fn` inside a span for processing one stored event, a child of the delivery's `stored`
   * context (a new trace when null). Synchronous or asynchronous: the span ends when `fn` returns
   * or its promise settles, as an error when it threw.
   */
  processing<T>(stored: string | null, name: string, attributes: TraceAttributes, fn: () => T): T;
  /** Runs `fn` inside a child span of the active one, for one stage of an event's handlers. */
  stage<T>(stage: string, fn: () => T): T;
  /**
   * A CLIENT span for one outgoing request: a child of `parent` (a stored context; a new trace when
   * null), or of the active span when `parent` is undefined.
   */
  outgoing(name: string, attributes: TraceAttributes, parent?: string | null): OutgoingTrace;
  /** The active span's context as stored (for an outbox message); null when there is none. */
  current(): string | null;
}

/** What a processing span is named: `process <evento>`, or `process <kind>` (a registry result, a poll answer). */
export function processingName(event: { readonly kind: string; readonly evento: string | null }): string {
  return `process ${event.evento ?? event.kind}`;
}

/**
 * What a processing span says of its event (both modes): no payload, so no CPF. When it continues
 * its delivery's trace (`continued`), the event id and this attempt only: its parent, the delivery's
 * SERVER span, says the rest (kind, evento, nu_proposta, request_id, webhook_id), once per trace, and
 * each attribute costs about a microsecond per span (docs/benchmark.md "Tracing"). A processing span
 * that starts a trace of its own (a poll answer; an event stored while tracing was off) says it all.
 */
export function processingAttributes(
  event: {
    readonly id: number;
    readonly kind: string;
    readonly evento: string | null;
    readonly nuProposta: number | string | null;
    readonly requestId: string | null;
    readonly webhookId: string | null;
    readonly attempts: number;
  },
  continued: boolean,
): TraceAttributes {
  // This run is attempt attempts + 1 (a retry after a handler failed has attempts > 0).
  const attempt = event.attempts + 1;
  if (continued) return { 'consig.event_id': event.id, 'consig.attempt': attempt };
  return {
    'consig.event_id': event.id,
    'consig.kind': event.kind,
    'consig.evento': event.evento,
    'consig.nu_proposta': event.nuProposta === null ? null : String(event.nuProposta),
    'consig.request_id': event.requestId,
    'consig.webhook_id': event.webhookId,
    'consig.attempt': attempt,
  };
}

/** `handler` run inside a span for its stage (domain/handler-order.ts); itself when tracing is off. */
export function tracedStage<A extends unknown[], R>(
  traces: Traces | undefined,
  stage: string,
  handler: (...args: A) => R,
): (...args: A) => R {
  if (traces === undefined) return handler;
  return (...args) => traces.stage(stage, () => handler(...args));
}
