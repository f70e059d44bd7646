import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { Client } from 'pg';
import {
  type Exit,
  HOST,
  httpGet,
  isAlive,
  logTail,
  metric,
  type Proc,
  sleep,
  spawnServe,
  stablePort,
  stopProcess,
  waitReady,
} from '../../rigs/harness';
import type { LocalPostgres } from '../../rigs/local-postgres';
import { ORDER_UNCERTAINTY_BOUND_MS } from '../../src/domain/order-time';
import { metricSum } from './failover-bed';
import { type Haproxy, startHaproxy } from './haproxy';
import { SECRET, signed } from './payloads';
import { createTestDatabase, withClient, workerPostgres } from './postgres';
import type { Release } from './release';
import { tempDir } from './tmp';

/**
 * The upgrade tier's bed (issue 46 item 5): one PostgreSQL database (on the jest worker's server),
 * a real HAProxy in front (haproxy.ts, the shipped configuration) and replica slots as a
 * Kubernetes StatefulSet keeps them: each slot a fixed port (HAProxy's server line), spool file and
 * REPLICA_ID, whichever build runs in it. Replacing a slot's replica is what a rollout does to a
 * pod: SIGTERM (the replica drains its spool and exits), then the other build on the same port,
 * spool and REPLICA_ID, in rotation once its /readyz answers 200 and HAProxy has it UP.
 */

export interface SlotRun {
  readonly release: Release;
  readonly proc: Proc;
  readonly logPath: string;
  readonly startedAt: number;
  /** SIGTERM's exit code, once stopped by the bed; or the code it exited with by itself, once {@link UpgradeBed.readiness} saw it. */
  exit?: number | null;
  exitedByItself?: boolean;
  /** When its /readyz first answered 200, and when HAProxy had it UP (inRotation). */
  readyAt?: number;
  upAt?: number;
}

export interface Slot {
  /** HAProxy's server name. */
  readonly name: string;
  readonly id: string;
  readonly port: number;
  readonly spool: string;
  /** Every process this slot ran, the current one last. */
  readonly runs: SlotRun[];
}

/** What a replica's `/readyz` settled at after it started. */
export type Readiness =
  | { kind: 'ready' }
  | { kind: 'refused'; status: number; error: string; message: string; retryAfter: string | null }
  | { kind: 'exited'; exit: Exit; log: string };

export interface StepRun {
  code: number | null;
  output: string;
  ms: number;
}

/** The replicas' settings: the docs' cluster mode behind a balancer, migrated by its own step. */
function replicaEnv(url: string, slot: Slot): Record<string, string> {
  return {
    HOST,
    PORT: String(slot.port),
    DATABASE_URL: url,
    DATABASE_PATH: slot.spool,
    REPLICA_ID: slot.id,
    WEBHOOK_SECRETS: SECRET,
    // docs/cluster-mode.md: PostgreSQL is migrated by `migrate` before a rollout, not by replicas.
    MIGRATE_ON_START: 'false',
    // HAProxy's X-Forwarded-For (`option forwardfor`), as deploy/compose/compose.yaml sets it.
    TRUST_PROXY: '1',
    LOG_LEVEL: 'info',
  };
}

export class UpgradeBed {
  private readonly sampler: NodeJS.Timeout;
  /** The highest consig_relay_lag_seconds any replica showed; each run's relay counters as last read. */
  maxRelayLagS = 0;
  private readonly relayErrors = new Map<SlotRun, number>();
  private readonly relayLate = new Map<SlotRun, number>();

  private constructor(
    readonly dir: string,
    private readonly cleanupDir: () => void,
    private readonly pg: LocalPostgres,
    readonly url: string,
    readonly lb: Haproxy,
    readonly slots: Slot[],
  ) {
    this.sampler = setInterval(() => void this.sample(), 500);
  }

  /** A fresh database, HAProxy over `count` slots (none running yet). */
  static async create(count = 3): Promise<UpgradeBed> {
    const tmp = tempDir('consig-upgrade-');
    const pg = await workerPostgres();
    try {
      const url = await createTestDatabase(pg, 'upgrade');
      const slots: Slot[] = [];
      for (let i = 1; i <= count; i++) {
        const port = await stablePort(slots.map((s) => s.port));
        slots.push({ name: `s${i}`, id: `replica-${i}`, port, spool: join(tmp.dir, `s${i}.db`), runs: [] });
      }
      const lb = await startHaproxy(tmp.dir, slots);
      return new UpgradeBed(tmp.dir, tmp.cleanup, pg, url, lb, slots);
    } catch (err) {
      await pg.stop();
      tmp.cleanup();
      throw err;
    }
  }

  /** The slot's current run. */
  current(slot: Slot): SlotRun | undefined {
    const run = slot.runs.at(-1);
    return run !== undefined && isAlive(run.proc.child) ? run : undefined;
  }

  /** `node <release> migrate` with DATABASE_URL, as the Job before a rollout (no spool: DATABASE_PATH names no file). */
  migrate(release: Release, env: Record<string, string> = {}): Promise<StepRun> {
    return runStep(release.bin, ['migrate'], {
      DATABASE_URL: this.url,
      DATABASE_PATH: join(this.dir, 'migrate-step.db'),
      ...env,
    });
  }

  /** Starts `release` in `slot` (stopped); resolves at once with the run. */
  launch(slot: Slot, release: Release, env: Record<string, string> = {}): SlotRun {
    if (this.current(slot)) throw new Error(`${slot.name} runs already`);
    const logPath = join(this.dir, `${slot.name}-${slot.runs.length + 1}-${release.name}.log`);
    const proc = spawnServe(release.bin, { ...replicaEnv(this.url, slot), ...env }, logPath);
    const run: SlotRun = { release, proc, logPath, startedAt: Date.now() };
    slot.runs.push(run);
    return run;
  }

  /** Resolves once the slot's replica answers /readyz 200 and HAProxy has it UP; throws when it exits first. */
  async inRotation(slot: Slot, timeoutMs = 90_000): Promise<void> {
    const run = slot.runs.at(-1);
    if (run === undefined) throw new Error(`${slot.name} never started`);
    if (!(await waitReady(run.proc, slot.port, run.logPath, timeoutMs)))
      throw new Error(
        `${slot.name} (${run.release.name}) exited before it was ready:\n${logTail(run.logPath)}`,
      );
    run.readyAt ??= Date.now();
    await this.lb.waitUp(slot.name, timeoutMs);
    run.upAt ??= Date.now();
  }

  /** Resolves once the slot's replica says it reaches PostgreSQL with its relay running (consig_cluster_connected 1); false after `timeoutMs`. */
  async connected(slot: Slot, timeoutMs = 60_000): Promise<boolean> {
    const until = Date.now() + timeoutMs;
    while (Date.now() < until && this.current(slot) !== undefined) {
      if ((await metricSum(slot.port, 'consig_cluster_connected')) === 1) return true;
      await sleep(100);
    }
    return false;
  }

  /** Polls the slot's /readyz until it is ready, refused, or the process exited. */
  async readiness(slot: Slot, timeoutMs = 60_000): Promise<Readiness> {
    const run = slot.runs.at(-1);
    if (run === undefined) throw new Error(`${slot.name} never started`);
    const until = Date.now() + timeoutMs;
    for (;;) {
      if (!isAlive(run.proc.child)) {
        const exit = await run.proc.exited;
        run.exit = exit.code;
        run.exitedByItself = true;
        return { kind: 'exited', exit, log: logTail(run.logPath, 1500) };
      }
      const answer = await getWithHeaders(slot.port, '/readyz');
      if (answer?.status === 200) return { kind: 'ready' };
      const body = parse(answer?.body);
      if (answer !== null && body.status === 'refused')
        return {
          kind: 'refused',
          status: answer.status,
          error: String(body.error),
          message: String(body.message),
          retryAfter: answer.retryAfter,
        };
      if (Date.now() > until) throw new Error(`${slot.name}: /readyz undecided after ${timeoutMs / 1000} s`);
      await sleep(100);
    }
  }

  /** SIGTERM (the replica drains its spool first); its exit code. */
  async stop(slot: Slot): Promise<number | null> {
    const run = this.current(slot);
    if (run === undefined) return slot.runs.at(-1)?.exit ?? null;
    await this.sampleSlot(slot);
    run.exit = await stopProcess(run.proc.child, 60_000);
    return run.exit;
  }

  /** A rollout's step on one slot: SIGTERM the old replica, start `release` there, in rotation. */
  async replace(slot: Slot, release: Release, env: Record<string, string> = {}): Promise<{ ms: number }> {
    const start = Date.now();
    await this.stop(slot);
    this.launch(slot, release, env);
    await this.inRotation(slot);
    return { ms: Date.now() - start };
  }

  /** Until every running replica's spool is relayed and nothing is pending in PostgreSQL, twice in a row; false after `timeoutMs`. */
  async waitDrained(timeoutMs = 60_000): Promise<boolean> {
    const until = Date.now() + timeoutMs;
    let quiet = 0;
    while (Date.now() < until && quiet < 2) {
      const live = this.slots.filter((s) => this.current(s) !== undefined);
      const backlogs = await Promise.all(live.map((s) => metricSum(s.port, 'consig_relay_backlog')));
      const pending = await withClient(this.url, async (c) => {
        const { rows } = await c.query<{ n: string }>(
          "SELECT count(*)::text AS n FROM events WHERE status IN ('pending', 'failed')",
        );
        return Number(rows[0]?.n ?? -1);
      }).catch(() => -1);
      quiet = backlogs.every((b) => b === 0) && pending === 0 ? quiet + 1 : 0;
      await sleep(250);
    }
    return quiet >= 2;
  }

  /** Resolves once every running replica measures PostgreSQL's clock within the order bound (issue 36), or has no such metric. */
  async clocksCertain(timeoutMs = 60_000): Promise<void> {
    const until = Date.now() + timeoutMs;
    for (const slot of this.slots.filter((s) => this.current(s) !== undefined)) {
      for (;;) {
        const res = await httpGet(slot.port, '/metrics', 3000);
        const u = res?.status === 200 ? metric(res.body, 'consig_cluster_clock_uncertainty_seconds') : NaN;
        // A release without the metric (null) orders on its own clock: nothing to wait for.
        if (u === null || u <= ORDER_UNCERTAINTY_BOUND_MS / 1000) break;
        if (Date.now() > until)
          throw new Error(`${slot.name}: clock uncertainty ${u} s after ${timeoutMs} ms`);
        await sleep(100);
      }
    }
  }

  /** Relay errors, and deliveries relayed after the watermark passed them, summed over every run (each run's last reading). */
  relayTotals(): { errors: number; late: number } {
    const sum = (m: Map<SlotRun, number>) => [...m.values()].reduce((s, n) => s + n, 0);
    return { errors: sum(this.relayErrors), late: sum(this.relayLate) };
  }

  private async sample(): Promise<void> {
    for (const slot of this.slots) await this.sampleSlot(slot);
  }

  private async sampleSlot(slot: Slot): Promise<void> {
    const run = this.current(slot);
    if (run !== undefined) {
      const res = await httpGet(slot.port, '/metrics', 1000);
      if (res?.status !== 200) return;
      this.maxRelayLagS = Math.max(this.maxRelayLagS, metric(res.body, 'consig_relay_lag_seconds') ?? 0);
      this.relayErrors.set(run, metric(res.body, 'consig_relay_errors_total') ?? 0);
      this.relayLate.set(run, metric(res.body, 'consig_relay_late_total') ?? 0);
    }
  }

  /** Stops every replica (SIGTERM), HAProxy and the sampler; drops the database. The exit codes of the replicas stopped here. */
  async close(): Promise<(number | null)[]> {
    clearInterval(this.sampler);
    const codes = await Promise.all(this.slots.map((s) => this.stop(s)));
    await this.lb.stop();
    await this.pg.stop();
    return codes;
  }

  /** Removes the logs and spools (kept when a check failed, to read them). */
  removeFiles(): void {
    this.cleanupDir();
  }

  /** The log lines of every run of every slot matching `pattern`, as `slot: message`. */
  logLines(pattern: RegExp): string[] {
    return this.slots.flatMap((s) =>
      s.runs.flatMap((r) =>
        readFileSync(r.logPath, 'utf8')
          .split('\n')
          .filter((l) => pattern.test(l))
          .map((l) => `${s.name} ${r.release.name}: ${(/"msg":"([^"]*)"/.exec(l)?.[1] ?? l).slice(0, 160)}`),
      ),
    );
  }
}

/** A command of a release's CLI, asynchronously (the load runs on this event loop meanwhile). */
export function runStep(bin: string, args: string[], env: Record<string, string>): Promise<StepRun> {
  const start = Date.now();
  return new Promise((done) => {
    execFile(
      process.execPath,
      [bin, ...args],
      { env: { PATH: process.env.PATH ?? '', ...env }, encoding: 'utf8', timeout: 120_000 },
      (err, stdout, stderr) =>
        done({
          code: err ? (typeof err.code === 'number' ? err.code : -1) : 0,
          output: `${stdout}${stderr}`.trim(),
          ms: Date.now() - start,
        }),
    );
  });
}

/**
 * A long read on `events`, as a report or a `pg_dump` holds one: `BEGIN; SELECT count(*) FROM
 * events; SELECT pg_sleep(s)` — ACCESS SHARE on events for `seconds`. Resolves once the lock is
 * held; `done` once the transaction ended, with how long it held it.
 */
export async function holdRead(url: string, seconds: number): Promise<{ done: Promise<number> }> {
  const client = new Client({ connectionString: url });
  client.on('error', () => {});
  await client.connect();
  await client.query('BEGIN');
  await client.query('SELECT count(*) FROM events');
  const since = Date.now();
  const done = client
    .query('SELECT pg_sleep($1)', [seconds])
    .then(() => client.query('COMMIT'))
    .finally(() => client.end())
    .then(() => Date.now() - since);
  return { done };
}

let probes = 0;

/**
 * A signed delivery straight to a replica (not through the balancer), a proposal of its own each
 * time (outside the load's numbers, so the checks' figures do not count it): its status (0: no
 * answer) and Retry-After.
 */
export function postDirect(port: number): Promise<{ status: number; retryAfter: string | null }> {
  probes += 1;
  const { raw, signature } = signed({
    evento: 'proposta.criada',
    timestamp: '2026-11-21T10:00:00-03:00',
    dados: {
      nu_proposta: 99_000_000 + probes,
      nu_cpf: '12345678909',
      st_proposta: 'criada',
      vl_emprestimo: 1000,
    },
    metadata: { tentativa: 1, webhook_id: `wh_upgrade_direct_${process.pid}_${probes}` },
  });
  return new Promise((done) => {
    const headers = { 'content-type': 'application/json', 'x-service-signature': signature };
    const req = request(
      { host: HOST, port, path: '/webhooks', method: 'POST', headers, agent: false },
      (res) => {
        res.resume();
        res.on('end', () =>
          done({ status: res.statusCode ?? 0, retryAfter: header(res.headers['retry-after']) }),
        );
      },
    );
    req.on('error', () => done({ status: 0, retryAfter: null }));
    req.end(raw);
  });
}

/** Deliveries a replica answered 200 (accepted or duplicate), from its own /metrics; null when it does not answer. */
export async function acknowledgedBy(port: number): Promise<number | null> {
  const res = await httpGet(port, '/metrics', 3000);
  if (res?.status !== 200) return null;
  return [...res.body.matchAll(/^consig_webhook_deliveries_total\{([^}]*)\} (\S+)$/gm)]
    .filter((m) => /outcome="(accepted|duplicate)"/.test(m[1] as string))
    .reduce((s, m) => s + Number(m[2]), 0);
}

function getWithHeaders(
  port: number,
  path: string,
): Promise<{ status: number; body: string; retryAfter: string | null } | null> {
  return new Promise((done) => {
    const req = request({ host: HOST, port, path, agent: false, timeout: 2000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () =>
        done({ status: res.statusCode ?? 0, body, retryAfter: header(res.headers['retry-after']) }),
      );
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', () => done(null));
    req.end();
  });
}

const header = (v: string | string[] | undefined): string | null =>
  Array.isArray(v) ? (v[0] ?? null) : (v ?? null);

function parse(body: string | undefined): Record<string, unknown> {
  try {
    return JSON.parse(body ?? '') as Record<string, unknown>;
  } catch {
    return {};
  }
}
