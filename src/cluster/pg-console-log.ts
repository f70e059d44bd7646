import type { PoolClient } from 'pg';
import {
  type ConsoleDeliveryFilter,
  type OverviewFigures,
  type OverviewQuery,
  overviewSinceHour,
  pageOf,
  type ProposalListing,
  rollupBusy,
  rollupCaughtUp,
  silenceFigures,
  type RollupResult,
  STORY_AVERBACOES,
} from '../domain/console';
import { runOfAnswers } from '../domain/delivery-alarm';
import type { PgAdminLog } from './pg-admin-log';
import {
  countConsoleEvents,
  proposalNamed,
  readConsoleAverbacoes,
  readConsoleEventIds,
  readConsoleEvents,
  readEventForwards,
  readOverviewCounts,
  readProposalForwards,
  readRegistryEvents,
  readRelaySpools,
  readStoryEvents,
} from './pg-console-reads';
import { isRollupBusy, readRollupHours, rollupPosition, updateRollup } from './pg-console-rollup';
import {
  clearSignInFailures,
  createSession,
  endAllSessions,
  endOtherTokensSessions,
  liveSession,
  pruneSessions,
  readAuditPage,
  readSignInFailures,
  recordAudit,
  recordRefusal,
  recordSignInFailure,
  removeSession,
  touchSession,
} from './pg-console-sessions';
import { readSharedAnswers } from './pg-delivery-alarm';
import { readOldestUnprocessed } from './pg-gauges';
import {
  countBy,
  readAverbacoes,
  readDeliveries,
  readLatestProposals,
  readProposalRow,
  readStuckProposals,
  stuckCounts,
} from './pg-reads';
import { iso, type Sql, sqlOf } from './sql';

/**
 * The operator console's log in cluster mode (contract §9, §10): what its pages read and its
 * actions write (src/http/console/console-log.ts ConsoleLog), on PostgreSQL, shared by every
 * replica — sessions, the audit table, the hourly rollup — in the SQLite log's shapes. It runs on
 * the admin log's runners (pg-admin-log.ts: the replica's pool, the running() guard, READ_TIMEOUT),
 * and its writes that the admin API also makes (replays, pause and resume) are the admin log's own.
 * Every call rejects with a StorageError while the replica is not connected to PostgreSQL or when
 * PostgreSQL cannot serve it: the console answers a 503 page, and the process stays up.
 *
 * Each page's reads run in one read-only snapshot where they are more than one (the overview, a
 * proposal's story), so the figures of a page agree with each other.
 */

/** The console's log on the admin log's connection to PostgreSQL (see the module's comment). */
export function pgConsoleLog(admin: PgAdminLog) {
  const { read, transaction } = admin.runners;
  // A statement's function as a method: reads in one read-only snapshot, writes in a transaction.
  const reading =
    <A extends unknown[], R>(fn: (db: PoolClient, ...args: A) => Promise<R>) =>
    (...args: A) =>
      read((db) => fn(db, ...args));
  const writing =
    <A extends unknown[], R>(fn: (tx: Sql, ...args: A) => Promise<R>) =>
    (...args: A) =>
      transaction((tx) => fn(tx, ...args));
  return {
    sessions: {
      create: writing(createSession),
      live: reading(liveSession),
      touch: writing(touchSession),
      remove: writing(removeSession),
      pruneExpired: writing(pruneSessions),
      endOthers: writing(endOtherTokensSessions),
      endAll: writing(endAllSessions),
    },
    signInFailures: {
      current: reading(readSignInFailures),
      failed: writing(recordSignInFailure),
      succeeded: writing(clearSignInFailures),
    },
    audit: { record: writing(recordAudit), refuse: writing(recordRefusal), page: reading(readAuditPage) },
    overview: (now: Date, query: OverviewQuery) => overview(admin, now, query),
    events: reading(readConsoleEvents),
    countEvents: reading(countConsoleEvents),
    eventIds: reading(readConsoleEventIds),
    /** The event and its body as the admin API reads them, and the messages it caused. */
    event: async (id: number) => {
      const found = await admin.event(id);
      return found && { ...found, forwards: await read((db) => readEventForwards(db, id)) };
    },
    deliveries: async (f: ConsoleDeliveryFilter) => {
      const limit = f.limit ?? 50;
      const rows = await read((db) =>
        readDeliveries(db, {
          outcome: f.outcome,
          from: f.from,
          to: f.to,
          beforeId: f.before,
          limit: limit + 1,
        }),
      );
      return pageOf(rows, limit, null);
    },
    proposals: reading(proposals),
    proposalExists: reading(proposalNamed),
    proposalStory: reading(proposalStory),
    averbacoes: reading(readConsoleAverbacoes),
    replayEvents: admin.replayEvents,
    forwards: admin.forwards,
  };
}

export type PgConsoleLog = ReturnType<typeof pgConsoleLog>;

async function proposals(db: PoolClient, listing: ProposalListing) {
  const rows =
    listing.kind === 'stuck'
      ? await readStuckProposals(db, listing.cutoffs, listing.limit, listing.after)
      : await readLatestProposals(db, listing.statuses, listing.limit, listing.before);
  return { counts: await countBy(db, 'proposals', 'status'), rows };
}

async function proposalStory(db: PoolClient, nu: number | string) {
  const proposal = await readProposalRow(db, String(nu));
  const events = await readStoryEvents(db, nu);
  if (proposal === undefined && events.length === 0) return undefined;
  const averbacoes = [];
  for (const row of await readAverbacoes(db, { nuProposta: String(nu), limit: STORY_AVERBACOES }))
    averbacoes.push({ row, answers: await readRegistryEvents(db, row.request_id) });
  return { proposal, events, averbacoes, forwards: await readProposalForwards(db, nu) };
}

/**
 * The hourly rollup brought up to date (its own transaction, under the rollup's advisory lock:
 * pg-console-rollup.ts), then the figures in one snapshot. The deactivation alarm's run and the
 * silence figures are every replica's answers (pg-delivery-alarm.ts), as the alarm itself reads them.
 */
async function overview(admin: PgAdminLog, now: Date, query: OverviewQuery): Promise<OverviewFigures> {
  const { read } = admin.runners;
  const rollup = await updateRollupOnce(admin, now);
  const figures = await read(async (db) => {
    const sql = sqlOf(db);
    const answers = await readSharedAnswers(sql);
    return {
      rollup,
      hours: await readRollupHours(db, overviewSinceHour(now)),
      ...silenceFigures(now, answers.lastDeliveryAt, query, () => answers.proposalsInFlight),
      run: runOfAnswers(answers.run),
      stuckByStatus: await stuckCounts(db, query.stuckCutoffs),
      ...(await overviewCounts(db)),
      relaySpools: await readRelaySpools(db),
    };
  });
  return { ...figures, destinations: await admin.forwards.destinationSummaries(query.destinations) };
}

async function overviewCounts(db: PoolClient) {
  const { events, averbacoes } = await readOverviewCounts(db);
  const oldest = await readOldestUnprocessed(sqlOf(db));
  return { events: { ...events, oldestUnprocessedAt: iso(oldest) }, averbacoes };
}

/** One rollup update when there is something to count; another replica's held too long: shown as is. */
async function updateRollupOnce(admin: PgAdminLog, now: Date): Promise<RollupResult> {
  const { read, transaction } = admin.runners;
  const at = await read((db) => rollupPosition(sqlOf(db)));
  if (rollupCaughtUp(at)) return { behind: 0, locked: false };
  try {
    return { behind: await transaction((tx) => updateRollup(tx, now)), locked: false };
  } catch (err) {
    if (!isRollupBusy(err)) throw err;
    return rollupBusy(at);
  }
}
