import type { TracingHandle, TracingHooks, TracingSettings } from './settings';

export type { TracingHandle, TracingHooks, TracingSettings } from './settings';

/**
 * Tracing (issue 35, docs/operating.md "Tracing"): started once per process (the main thread, and
 * the forwarding sender's worker thread, each with an exporter of its own) when
 * OTEL_TRACES_EXPORTER=otlp. Off, nothing of the SDK is loaded and the seams hold no Traces.
 */
let started: TracingHandle | null = null;

export function startTracing(settings: TracingSettings, hooks: TracingHooks): TracingHandle {
  if (started !== null) return started; // one SDK per process: a second receiver in it shares it
  // Required here, not imported at the top: with tracing off the SDK is never loaded.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const sdk = require('./sdk') as typeof import('./sdk');
  const handle = sdk.startSdk(settings, hooks);
  started = {
    traces: handle.traces,
    shutdown: async () => {
      started = null;
      await handle.shutdown();
    },
  };
  return started;
}
