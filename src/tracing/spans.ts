import {
  type Context,
  context,
  defaultTextMapGetter,
  defaultTextMapSetter,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  type SpanOptions,
  SpanStatusCode,
  trace,
  type Tracer,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import type { OutgoingTrace, RequestTrace, TraceAttributes, Traces } from '../domain/tracing';

/**
 * The seams' {@link Traces} on an OpenTelemetry tracer. Each span and what it means is listed in
 * docs/operating.md "Tracing"; their attributes are the receiver's own (`consig.*`) besides the
 * semantic conventions' HTTP ones, and never carry a CPF, a secret, a token or a signature.
 */

const w3c = new W3CTraceContextPropagator();

/*
 * A span's attributes are set after its start, not given to startSpan: the SDK copies what it is
 * given twice (for the sampler, then for the span) before setting each one; set afterwards, each is
 * set once (about 3 µs less per delivery of three spans, bench/tracing-sdk.ts). The standard samplers
 * (OTEL_TRACES_SAMPLER) do not read attributes.
 */
const SERVER: SpanOptions = { kind: SpanKind.SERVER };
const CONSUMER: SpanOptions = { kind: SpanKind.CONSUMER };
const CLIENT: SpanOptions = { kind: SpanKind.CLIENT };

export function spanTraces(tracer: Tracer): Traces {
  return {
    request(route, traceparent, tracestate) {
      const parent = traceparent === undefined ? ROOT_CONTEXT : extract(traceparent, tracestate);
      const span = tracer.startSpan(`POST ${route}`, SERVER, parent);
      span.setAttribute('http.request.method', 'POST');
      span.setAttribute('http.route', route);
      return requestTrace(span);
    },
    processing(stored, name, attributes, fn) {
      const parent = stored === null ? ROOT_CONTEXT : parse(stored);
      const span = tracer.startSpan(name, CONSUMER, parent);
      setDefined(span, attributes);
      return within(span, trace.setSpan(parent, span), fn);
    },
    stage(stage, fn) {
      const parent = context.active();
      const span = tracer.startSpan(`stage ${stage}`, undefined, parent);
      span.setAttribute('consig.stage', stage);
      return within(span, trace.setSpan(parent, span), fn);
    },
    outgoing(name, attributes, parent) {
      const from = parent === undefined ? context.active() : parent === null ? ROOT_CONTEXT : parse(parent);
      const span = tracer.startSpan(name, CLIENT, from);
      setDefined(span, attributes);
      return outgoingTrace(span, trace.setSpan(from, span));
    },
    current() {
      const span = trace.getSpan(context.active());
      return span === undefined ? null : stored(span);
    },
  };
}

/**
 * The request's span, ended with its answer. Its log line carries the span's ids in its own fields
 * (`logIds`) rather than being written inside the span: no context to build and enter per request.
 */
function requestTrace(span: Span): RequestTrace {
  const c = span.spanContext();
  return {
    stored: stored(span),
    logIds: { trace_id: c.traceId, span_id: c.spanId },
    end(outcome, httpStatus, attributes) {
      if (attributes !== undefined) setDefined(span, attributes);
      span.setAttribute('consig.outcome', outcome);
      span.setAttribute('http.response.status_code', httpStatus);
      // A refusal of the sender's (4xx) is the answer asked for; only the server's failures are errors.
      if (httpStatus >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    },
  };
}

function outgoingTrace(span: Span, ctx: Context): OutgoingTrace {
  const headers: Record<string, string> = {};
  w3c.inject(ctx, headers, defaultTextMapSetter);
  return {
    headers,
    run: (fn) => context.with(ctx, fn),
    end(outcome, httpStatus, failed, attributes) {
      if (attributes !== undefined) setDefined(span, attributes);
      span.setAttribute('consig.outcome', outcome);
      if (httpStatus !== null) span.setAttribute('http.response.status_code', httpStatus);
      if (failed) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    },
  };
}

/**
 * Runs `fn` with `span` active and ends it when `fn` returns or its promise settles. An error marks
 * the span with its class only (`error.type`): a handler's message may quote the payload.
 */
function within<T>(span: Span, ctx: Context, fn: () => T): T {
  let result: T;
  try {
    result = context.with(ctx, fn);
  } catch (err) {
    return failed(span, err);
  }
  if (result instanceof Promise)
    return result.then(
      (value: unknown) => {
        span.end();
        return value;
      },
      (err: unknown) => failed(span, err),
    ) as T;
  span.end();
  return result;
}

function failed(span: Span, err: unknown): never {
  span.setAttribute('error.type', err instanceof Error ? err.name : 'unknown');
  span.setStatus({ code: SpanStatusCode.ERROR });
  span.end();
  throw err;
}

/** A span's context as the database keeps it: `traceparent`, then a space and `tracestate`. */
function stored(span: Span): string {
  const c = span.spanContext();
  const parent = `00-${c.traceId}-${c.spanId}-${(c.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
  const state = c.traceState?.serialize();
  return state === undefined || state === '' ? parent : `${parent} ${state}`;
}

/** A stored context, as the parent of a span (an unreadable one: a new trace). */
function parse(text: string): Context {
  const space = text.indexOf(' ');
  return space === -1 ? extract(text, undefined) : extract(text.slice(0, space), text.slice(space + 1));
}

function extract(traceparent: string, tracestate: string | undefined): Context {
  const carrier: Record<string, string> = { traceparent };
  if (tracestate !== undefined) carrier.tracestate = tracestate;
  return w3c.extract(ROOT_CONTEXT, carrier, defaultTextMapGetter);
}

/** Sets on `span` the attributes with a value, one by one (no object in between). */
function setDefined(span: Span, attributes: TraceAttributes): void {
  for (const key in attributes) {
    const value = attributes[key];
    if (value !== null && value !== undefined) span.setAttribute(key, value);
  }
}
