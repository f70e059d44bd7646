import { rmSync } from 'node:fs';
import { tempDir } from '../helpers/tmp';
import { probePackage, type Release, upgradeReleases, type UpgradeReleases } from '../helpers/release';
import { holdRead, runStep, type Slot, type SlotRun } from '../helpers/upgrade-bed';
import {
  expectClean,
  type Outcome,
  report,
  runScenario,
  type StepContext,
} from '../helpers/upgrade-scenario';
import {
  BREAKING_ROLLOUT,
  breakingMigrationLands,
  expectProcesses,
  expectRuns,
  migratedAfterMs,
  migrateStep,
  restartRefused,
  rollTo,
} from '../helpers/upgrade-steps';

/**
 * The upgrade tier (issue 46 item 5; item 4, rollback): the previous release
 * (test/upgrade/previous-release.json, or UPGRADE_FROM=<commit>) in three slots on one PostgreSQL
 * behind a real HAProxy (deploy/compose/haproxy.cfg), ~40 signed deliveries/s through it, and the
 * next release — this tree with one more migration, `-- compat: previous` or `-- compat: breaking`
 * (release.ts) — rolled out, mixed with the previous one, and rolled back. Each scenario prints its
 * row of the table and checks every bad column is 0. A defect the previous release is known
 * to have (previous-release.json `defects`) is named there, and the scenario it spoils runs this
 * tree's own build in its place (release.ts `restarted`). One file, so that its scenarios run one
 * after the other: on 2 cores, two at once slow each other into what they measure.
 *
 * Run: `npm run build && npx jest --selectProjects upgrade` (`-t d2` for one scenario);
 * `UPGRADE_FROM=<commit>` to measure from another release (one from before issue 46 fails its
 * checks: it predates them).
 */

let releases: UpgradeReleases;
/** next + a compatible migration for PostgreSQL and one for SQLite, which every replica applies to its spool. */
let withSpoolMigration: Release;
const packages = tempDir('consig-upgrade-packages-');
const outcomes: Outcome[] = [];
const READ_SECONDS = 8;
const TIMEOUT_MS = 240_000;

// Building the previous release takes ~15 s (its lock file is this tree's), minutes when it needs `npm ci`.
beforeAll(() => {
  releases = upgradeReleases(packages.dir);
  withSpoolMigration = probePackage(releases.next, 'previous', packages.dir, { spool: true });
}, 900_000);

afterAll(() => {
  if (outcomes.length > 0)
    process.stdout.write(`\nThe upgrade tier (issue 46)\n${outcomes.map(report).join('\n')}`);
  packages.cleanup();
});

async function run(...args: Parameters<typeof runScenario>): Promise<void> {
  const o = await runScenario(...args);
  outcomes.push(o);
  expectClean(o);
}

const slotsOf = (ctx: StepContext) => ctx.bed.slots as [Slot, Slot, Slot];
const since = (run: SlotRun, at: number | undefined) =>
  at === undefined ? 'never' : `${at - run.startedAt} ms`;

describe('rolling upgrades', () => {
  it(
    'a. plain roll: `migrate` as a step, then each slot replaced by the next release: nothing lost, nothing out of order, every answer 200',
    async () => {
      const { previous, compatible: next } = releases;
      await run({
        run: `a. plain roll ${previous.name} → ${next.name}`,
        seed: 46_001,
        previous,
        steps: async (ctx) => {
          await migrateStep(ctx, next);
          await rollTo(ctx, next);
        },
      });
    },
    TIMEOUT_MS,
  );

  it(
    `c1. an ${READ_SECONDS} s read on events while \`migrate\` runs: nothing lost or out of order`,
    async () => {
      const { previous, compatible: next } = releases;
      await run({
        run: `c1. ${READ_SECONDS} s read on events during \`migrate\` ${previous.name} → ${next.name}`,
        seed: 46_031,
        previous,
        steps: async (ctx) => {
          const read = await holdRead(ctx.bed.url, READ_SECONDS);
          await migrateStep(ctx, next);
          ctx.note('the read on events held its lock', `${await read.done} ms`);
          await rollTo(ctx, next);
        },
      });
    },
    TIMEOUT_MS,
  );

  it(
    `c2. an ${READ_SECONDS} s read on events while a replica migrates at its start (MIGRATE_ON_START=true): nothing lost or out of order`,
    async () => {
      const { previous, compatible: next } = releases;
      await run({
        run: `c2. ${READ_SECONDS} s read on events while a replica migrates at start ${previous.name} → ${next.name}`,
        seed: 46_032,
        previous,
        steps: async (ctx) => {
          const [first, ...rest] = slotsOf(ctx);
          const read = await holdRead(ctx.bed.url, READ_SECONDS);
          await rollTo(ctx, next, [first], { MIGRATE_ON_START: 'true' });
          ctx.check(`${first.name} (${next.name}) reaches PostgreSQL`, await ctx.bed.connected(first));
          const started = first.runs.at(-1) as SlotRun;
          const applied = migratedAfterMs(started);
          ctx.check(`${first.name} (${next.name}) applied the migration at its start`, applied !== null);
          ctx.note(
            `${first.name} (${next.name}) from its start: /readyz 200, UP in HAProxy, the migration applied (its log)`,
            `${since(started, started.readyAt)}, ${since(started, started.upAt)}, ${applied ?? 'none'} ms`,
          );
          ctx.note('the read on events held its lock', `${await read.done} ms`);
          await rollTo(ctx, next, rest, { MIGRATE_ON_START: 'true' });
        },
      });
    },
    TIMEOUT_MS,
  );
});

describe('an old replica restarted mid-roll', () => {
  it(
    'b1. on a compatible schema it runs and takes traffic: nothing lost, nothing out of order',
    async () => {
      const { previous, compatible: next } = releases;
      await run({
        run: `b1. old replica restarted mid-roll, ${previous.name} → ${next.name}`,
        seed: 46_021,
        previous,
        steps: async (ctx) => {
          const [s1, s2, s3] = slotsOf(ctx);
          await migrateStep(ctx, next);
          await rollTo(ctx, next, [s1]);
          await ctx.bed.stop(s2);
          ctx.bed.launch(s2, previous);
          await expectRuns(ctx, s2, true);
          await rollTo(ctx, next, [s2, s3]);
        },
      });
    },
    TIMEOUT_MS,
  );

  it(
    'b2. after a breaking migration it stays out of rotation and acknowledges nothing: nothing lost, nothing out of order',
    async () => {
      const { previous, breaking: next, restarted } = releases;
      await run({
        run: `b2. old replica (${restarted.name}) restarted mid-roll, ${previous.name} → ${next.name}`,
        seed: 46_022,
        previous,
        breakingUnderPrevious: true,
        steps: async (ctx) => {
          const [, s2, s3] = slotsOf(ctx);
          await breakingMigrationLands(ctx, next);
          await restartRefused(ctx, s3, restarted, next.pgVersion);
          await rollTo(ctx, next, [s2, s3], BREAKING_ROLLOUT);
        },
      });
    },
    TIMEOUT_MS,
  );
});

describe('rolling back one slot', () => {
  it(
    'd1. with no breaking migration between, the previous release runs on the newer schema and processes',
    async () => {
      const { previous, compatible: next } = releases;
      await run({
        run: `d1. rollback ${next.name} → ${previous.name}`,
        seed: 46_041,
        previous,
        steps: async (ctx) => {
          const [s1] = slotsOf(ctx);
          await migrateStep(ctx, next);
          await rollTo(ctx, next, [s1]);
          await ctx.bed.stop(s1);
          ctx.bed.launch(s1, previous);
          await expectRuns(ctx, s1, true);
          await expectProcesses(ctx, s1);
        },
      });
    },
    TIMEOUT_MS,
  );

  it(
    'd2. across a breaking migration it is refused clearly and acknowledges nothing; forward again, nothing lost',
    async () => {
      const { previous, breaking: next, restarted } = releases;
      await run({
        run: `d2. rollback ${next.name} → ${restarted.name}`,
        seed: 46_042,
        previous,
        breakingUnderPrevious: true,
        steps: async (ctx) => {
          const [, s2, s3] = slotsOf(ctx);
          await breakingMigrationLands(ctx, next);
          await rollTo(ctx, next, [s2, s3], BREAKING_ROLLOUT);
          await restartRefused(ctx, s3, restarted, next.pgVersion);
          await rollTo(ctx, next, [s3], BREAKING_ROLLOUT);
        },
      });
    },
    TIMEOUT_MS,
  );

  it(
    'd3. over a release that also migrated the spool (SQLite): the previous release refuses the spool and exits, naming it; with the drained spool set aside it runs',
    async () => {
      const { previous } = releases;
      const next = withSpoolMigration;
      await run({
        run: `d3. rollback ${next.name} → ${previous.name}`,
        seed: 46_043,
        previous,
        steps: async (ctx) => {
          const [s1] = slotsOf(ctx);
          await migrateStep(ctx, next);
          await rollTo(ctx, next, [s1]);
          await ctx.bed.stop(s1);
          ctx.bed.launch(s1, previous);
          const first = await ctx.bed.readiness(s1);
          const said = first.kind === 'exited' ? first.log.trim().split('\n').at(-1) : JSON.stringify(first);
          ctx.note(
            `${s1.name} (${previous.name}) on the spool ${next.name} migrated`,
            `${first.kind}: ${said}`,
          );
          ctx.check(
            `${s1.name} (${previous.name}) refuses the spool's newer SQLite migration, naming it`,
            first.kind === 'exited' && first.exit.code !== 0 && /does not know/.test(first.log),
            JSON.stringify(first),
          );
          await ctx.bed.stop(s1); // when it ran after all (the check above failed)
          await setSpoolAside(ctx, s1, next);
          ctx.bed.launch(s1, previous);
          await expectRuns(ctx, s1, true);
          await expectProcesses(ctx, s1);
        },
      });
    },
    TIMEOUT_MS,
  );
});

/** The operator's way: `relay verify` (the spool is all in PostgreSQL: SIGTERM drained it), then the file removed. */
async function setSpoolAside(ctx: StepContext, slot: Slot, wrote: Release): Promise<void> {
  const verify = await runStep(wrote.bin, ['relay', 'verify', slot.spool], { DATABASE_URL: ctx.bed.url });
  ctx.note(`\`relay verify\` of ${slot.name}'s spool (${wrote.name})`, `exit ${verify.code}`);
  ctx.check(`${slot.name}'s spool is all in PostgreSQL`, verify.code === 0, verify.output);
  for (const suffix of ['', '-wal', '-shm']) rmSync(`${slot.spool}${suffix}`, { force: true });
}
