-- 0014: tracing (issue 35; docs/operating.md "Tracing"). Forward-only.
--
-- The trace context of the delivery that stored an event, so that processing it (later, and in
-- cluster mode on another replica, through the relay) continues the same trace; and of the
-- processing that stored a forwarded message, so that each attempt to send it is a span of that
-- trace and its request's `traceparent` names it. W3C `traceparent`, then a space and `tracestate`
-- when there is one. NULL while OTEL_TRACES_EXPORTER is off, and for rows from before.
ALTER TABLE events ADD COLUMN trace_context TEXT;
ALTER TABLE forward_messages ADD COLUMN trace_context TEXT;
