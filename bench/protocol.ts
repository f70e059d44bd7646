/**
 * What the bench orchestrator (run.ts) and its load generator (load.ts) say to each other over the
 * child-process IPC channel.
 */

export interface LoadSpec {
  host: string;
  port: number;
  path: string;
  concurrency: number;
  warmupMs: number;
  durationMs: number;
  secret: string;
  /** Makes every `metadata.webhook_id` of this run unique: `wh_<prefix>_<seq>`. */
  idPrefix: string;
}

export interface LoadResult {
  concurrency: number;
  /** Length of the measured window, in ms. */
  windowMs: number;
  /** 200 answers completed inside the measured window. */
  measured: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** Every 200 answer of the run: warm-up, measured window and the requests still in flight at its end. */
  ok200Total: number;
  /** Answers other than 200 over the whole run, by status code. */
  non200: Record<string, number>;
  /** Requests that got no HTTP answer (socket errors), over the whole run. */
  socketErrors: number;
  /** A few non-200 bodies and socket error messages, for diagnosis. */
  errorSamples: string[];
  /** Bodies signed during the measured window because the pre-generated pool ran out (should be 0). */
  signedInline: number;
}

export type LoadMessage = { type: 'result'; result: LoadResult } | { type: 'error'; message: string };
