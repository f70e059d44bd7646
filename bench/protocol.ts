import type { ChildProcess } from 'node:child_process';
/**
 * The shapes the bench's modules share: what the orchestrator (run.ts) and its load generator
 * (load.ts) say to each other over the child-process IPC channel, and the harnesses run.ts hands
 * the forwarding, console and cluster figures (so that no figure imports another's module back).
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
  /** Sends `{ type: 'window' }` when the measured window starts (its bodies signed, its loops about to run). */
  announceWindow?: boolean;
  /** Returns each answer of the measured window (see {@link LoadResult.answers}). */
  keepAnswers?: boolean;
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
  /** With `keepAnswers`: each answer of the window, [ms from the window's start to it, its latency ms, its status (0: none)]. */
  answers?: [number, number, number][];
}

export type LoadMessage =
  { type: 'result'; result: LoadResult } | { type: 'error'; message: string } | { type: 'window' };

export interface ForwardingHarness {
  /** A directory of this bench run, removed at its end. */
  dir: string;
  /** The receiver's `WEBHOOK_SECRETS`. */
  webhookSecret: string;
  /** Registers a child for clean-up when the bench is interrupted. */
  track(child: ChildProcess): ChildProcess;
  stopChild(child: ChildProcess): Promise<void>;
  /** Starts `serve` with `env` added; on `databasePath` instead of a fresh file when given. */
  startReceiver(
    name: string,
    env: Record<string, string>,
    databasePath?: string,
    /** Another build's receiver (`--baseline`). */
    bin?: string,
  ): Promise<ReceiverRun>;
}

/** A receiver started by run.ts (`serve` on a fresh directory, ready: its /readyz answered 200). */
export interface ReceiverRun {
  port: number;
  pid: number | undefined;
  dbPath: string;
  logPath: string;
  /** False once the process has exited. */
  alive(): boolean;
  /** SIGTERM, bounded wait, SIGKILL. */
  stop(): Promise<void>;
}

export interface ClusterHarness extends ForwardingHarness {
  /** The HTTP rows' load generator (load.ts, a child of its own) against `port`, signed with the webhook secret. */
  runLoad(spec: {
    port: number;
    concurrency: number;
    warmupMs: number;
    durationMs: number;
    idPrefix: string;
    /** Pins the load generator to these cores (taskset's list form). */
    cpus?: string;
    /** Called when the measured window starts (after the warm-up and the signing of its bodies). */
    onWindow?: () => void;
    keepAnswers?: boolean;
  }): Promise<LoadResult>;
}

export interface ClusterBenchOptions {
  /** Ingest rounds; each runs SQLite mode, cluster mode and an ingest-only replica once (ABC CBA order). */
  rounds: number;
  /** Row 1 on every core, unpinned (see {@link Layout}). @default false */
  shareCores?: boolean;
  /** The ingest load's concurrency (the HTTP rows' c=50). */
  concurrency: number;
  warmupMs: number;
  durationMs: number;
  /** Deliveries per second of the fixed-rate run (rows 2 and 4), and its measured length. */
  rate: number;
  rateMs: number;
  /** Pending events the processing figure drains, and the CLUSTER_CONCURRENCY values it tries. */
  drainEvents: number;
  drainConcurrencies: readonly number[];
  /** Progress lines (stderr). */
  log(text: string): void;
}
