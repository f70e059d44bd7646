import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { httpGet, isAlive, metricTotal, sleep } from '../../rigs/harness';
import type { Release } from './release';
import { acknowledgedBy, postDirect, type Slot, type SlotRun } from './upgrade-bed';
import type { StepContext } from './upgrade-scenario';

/**
 * The steps the upgrade tier's scenarios are made of (issue 46 item 5): a rollout over slots, and
 * what a replica of one version must do on the schema of another — run and take traffic, or
 * refuse it out of rotation and acknowledge nothing.
 */

/** How long a replica is watched once it runs, or once it refuses (HAProxy checks every 2 s). */
const WATCH_MS = 4000;

/** Replaces each slot in turn by `release`, each in rotation before the next is touched. */
export async function rollTo(
  { bed, note }: StepContext,
  release: Release,
  slots: readonly Slot[] = bed.slots,
  env: Record<string, string> = {},
): Promise<void> {
  for (const slot of slots) {
    const { ms } = await bed.replace(slot, release, env);
    note(`${slot.name} → ${release.name} (SIGTERM → the new one UP in HAProxy)`, `${ms} ms`);
  }
}

/**
 * `migrate` of `release` as its own step, checked to exit 0. A failed run is tried twice more, as
 * deploy/kubernetes/migrate-job.yaml's Job does (`backoffLimit: 2`), so that the run goes on to be
 * measured; the failure stays an unmet expectation, its output in the run's directory.
 */
export async function migrateStep({ bed, note, check }: StepContext, release: Release): Promise<boolean> {
  for (let attempt = 1; attempt <= 3; attempt++) {
    const m = await bed.migrate(release);
    writeFileSync(join(bed.dir, `migrate-${release.name}-${attempt}.log`), m.output);
    note(`migrate step (${release.name}), run ${attempt}`, `exit ${m.code} in ${m.ms} ms`);
    if (check(`\`migrate\` of ${release.name} exits 0 (run ${attempt})`, m.code === 0, m.output)) return true;
    await sleep(1000);
  }
  return false;
}

/**
 * The slot's replica (just started) runs on the schema and takes traffic: ready, UP in HAProxy,
 * answering deliveries 200; on a schema newer than its code, it says so in one log line.
 */
export async function expectRuns(ctx: StepContext, slot: Slot, newer: boolean): Promise<void> {
  const { bed, check } = ctx;
  const run = slot.runs.at(-1) as SlotRun;
  const what = `${slot.name} (${run.release.name}) runs`;
  const r = await bed.readiness(slot);
  if (!check(`${what}: /readyz 200`, r.kind === 'ready', JSON.stringify(r))) return;
  await bed.inRotation(slot);
  await sleep(WATCH_MS);
  const acked = await acknowledgedBy(slot.port);
  check(`${what}: it answered deliveries 200 through HAProxy`, (acked ?? 0) > 0, `acknowledged ${acked}`);
  if (newer) {
    const said = readFileSync(run.logPath, 'utf8').includes('running on it');
    check(`${what}: its log says it runs on a newer schema`, said);
  }
}

/**
 * The slot's replica restarted on `release`, which must refuse the schema at `schemaAt` (issue 46
 * item 1): not even a delivery sent the moment it listens acknowledged (a balancer that still has
 * the slot UP sends it one then), /readyz 503 `schema_incompatible` naming the schema's version and
 * its code's, out of HAProxy's rotation, a delivery sent to it straight answered 503 with
 * Retry-After, and nothing acknowledged while it ran.
 */
export async function restartRefused(
  ctx: StepContext,
  slot: Slot,
  release: Release,
  schemaAt: string,
): Promise<void> {
  const { bed, check, note } = ctx;
  await bed.stop(slot);
  const run = bed.launch(slot, release);
  const what = `${slot.name} (${release.name}) refuses the schema at ${schemaAt}`;
  const first = await firstAnswer(run, slot.port);
  check(
    `${what}: a delivery sent the moment it listens is not acknowledged`,
    first !== 200,
    `answered ${first}`,
  );
  const r = await bed.readiness(slot);
  note(
    `${slot.name} (${release.name}) /readyz`,
    r.kind === 'refused' ? `${r.status} ${r.error}: ${r.message}` : r.kind,
  );
  const refused = r.kind === 'refused' && r.status === 503 && r.error === 'schema_incompatible';
  check(`${what}: /readyz 503 schema_incompatible`, refused, JSON.stringify(r));
  const named = r.kind === 'refused' && r.message.includes(schemaAt) && r.message.includes(release.pgVersion);
  check(`${what}: /readyz names both versions (${schemaAt}, ${release.pgVersion})`, named, JSON.stringify(r));
  if (r.kind !== 'refused') return;
  await sleep(WATCH_MS);
  const direct = await postDirect(slot.port);
  const answered503 = direct.status === 503 && direct.retryAfter !== null;
  check(
    `${what}: a delivery sent to it straight is answered 503 with Retry-After`,
    answered503,
    JSON.stringify(direct),
  );
  const up = (await bed.lb.stats()).get(slot.name)?.status;
  check(`${what}: out of HAProxy's rotation`, up !== undefined && !up.startsWith('UP'), `HAProxy: ${up}`);
  const acked = await acknowledgedBy(slot.port);
  check(`${what}: it acknowledged nothing`, acked === 0, `acknowledged ${acked}`);
}

/** The status of the first signed delivery the run's replica answers, sent from the moment it listens (0: it exited first). */
async function firstAnswer(run: SlotRun, port: number): Promise<number> {
  const until = Date.now() + 60_000;
  while (Date.now() < until && isAlive(run.proc.child)) {
    const { status } = await postDirect(port);
    if (status !== 0) return status;
    await sleep(5);
  }
  return 0;
}

/** From a replica's log (pino's `time`): how long after its start the last PostgreSQL migration was applied; null when none was. */
export function migratedAfterMs(run: SlotRun): number | null {
  const times = readFileSync(run.logPath, 'utf8')
    .split('\n')
    .filter((l) => l.includes('applied PostgreSQL migration'))
    .map((l) => new Date((JSON.parse(l) as { time: string | number }).time).getTime());
  return times.length === 0 ? null : Math.max(...times) - run.startedAt;
}

/** Polls the slot's /readyz until it answers 503 `refused` (a running replica meeting a breaking migration); when, or null after `timeoutMs`. */
export async function refusedWithin(ctx: StepContext, slot: Slot, timeoutMs: number): Promise<number | null> {
  const start = Date.now();
  while (Date.now() - start < timeoutMs) {
    const r = await ctx.bed.readiness(slot, timeoutMs);
    if (r.kind === 'refused') return Date.now() - start;
    if (r.kind === 'exited') return null;
    await sleep(200);
  }
  return null;
}

/**
 * A release with a breaking migration is rolled out with MIGRATE_ON_START=true on every new replica
 * and no `migrate` Job first (docs/operating.md "Upgrading and rolling back": a Job would take
 * every old replica out at once): the first new replica migrates as it starts.
 */
export const BREAKING_ROLLOUT: Readonly<Record<string, string>> = { MIGRATE_ON_START: 'true' };

/**
 * A breaking migration rolled out as the docs say: the first slot replaced by the next release,
 * which migrates as it starts; the old replicas refuse the new schema as it lands (each checks
 * every 5 s).
 */
export async function breakingMigrationLands(ctx: StepContext, next: Release): Promise<void> {
  const { bed, note, check } = ctx;
  const [first, ...old] = bed.slots;
  if (first === undefined) throw new Error('no slot');
  await rollTo(ctx, next, [first], BREAKING_ROLLOUT);
  for (const slot of old) {
    const after = await refusedWithin(ctx, slot, 15_000);
    const run = slot.runs.at(-1) as SlotRun;
    note(
      `${slot.name} (${run.release.name}, running): refused once ${first.name} was UP`,
      after === null ? 'never' : `within ${after} ms`,
    );
    check(
      `${slot.name} (${run.release.name}) stops taking work when the breaking migration lands`,
      after !== null,
    );
  }
}

/** The rolled-back slot's replica processed events (consig_pipeline_events_processed_total > 0). */
export async function expectProcesses(ctx: StepContext, slot: Slot): Promise<void> {
  const res = await httpGet(slot.port, '/metrics', 3000);
  const processed =
    res?.status === 200 ? metricTotal(res.body, 'consig_pipeline_events_processed_total') : null;
  const run = slot.runs.at(-1) as SlotRun;
  ctx.note(`${slot.name} (${run.release.name}) events processed`, String(processed));
  ctx.check(
    `${slot.name} (${run.release.name}) processes events`,
    (processed ?? 0) > 0,
    `processed ${processed}`,
  );
}
