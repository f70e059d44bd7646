import { trace } from '@opentelemetry/api';

/**
 * pino's mixin when tracing is on: a line written inside a span carries its `trace_id` and
 * `span_id` (issue 35, "logs and traces meet"). Installed only then: off, log calls pay nothing.
 */
export function activeSpanIds(): Record<string, string> {
  const span = trace.getActiveSpan();
  if (span === undefined) return {};
  const { traceId, spanId } = span.spanContext();
  return { trace_id: traceId, span_id: spanId };
}

/**
 * pino's merge of the mixin's ids into a line (the line's own fields win, as pino's default): a
 * line written outside any span is taken as it is, where the default would copy it into the
 * mixin's empty object, field by field.
 */
export function mergeSpanIds(line: object, ids: object): object {
  return (ids as { trace_id?: string }).trace_id === undefined ? line : Object.assign(ids, line);
}
