-- 0010: tracing (issue 35): SQLite's migrations/0014_trace_context.sql (see its notes) in
-- PostgreSQL's types. The relay copies an event's context from the spool; a kick writes a message's.
ALTER TABLE events ADD COLUMN trace_context text;
ALTER TABLE forward_messages ADD COLUMN trace_context text;
