import {
  ANSWER_DEADLINE_MS,
  type ClusterChecks,
  type ClusterCrashResult,
  formatClusterCrash,
  runClusterCrash,
} from '../../rigs/cluster-crash';
import type { LocalPostgres } from '../../rigs/local-postgres';
import { startTestPostgres, withClient } from '../helpers/postgres';
import { BIN } from '../helpers/process';

/**
 * The short CI version of `node dist/rigs/cluster-crash.js` (issue 13): three replicas of the built
 * receiver on one real PostgreSQL (durable settings), signed load with 10 % re-sends to a different
 * replica, one replica SIGKILLed and restarted on its spool, PostgreSQL restarted with
 * `-m immediate`; then the relay's catch-up and the checks in PostgreSQL. The replicas forward
 * `proposal.changed` to a destination on loopback; the replica SIGKILLed is the one sending to it,
 * with requests in flight; then the outbox and what the destination received are checked.
 */

let pg: LocalPostgres | undefined;

beforeAll(async () => {
  // Not `fast`: the restart must replay a WAL that was really fsynced.
  pg = await startTestPostgres({ fast: false });
}, 60_000);

afterAll(async () => {
  await pg?.stop();
});

it('three replicas, one SIGKILLed, PostgreSQL restarted: every 200 one event, processed once in order, forwarded at least once in order, answers all 200 meanwhile', async () => {
  const result = await runClusterCrash({
    postgres: pg,
    bin: BIN,
    deliveries: 1500,
    concurrency: 12,
    seed: 20261122,
    // Bounds, not expectations: the run usually takes 20-40 s here; the catch-up time is reported.
    timeoutMs: 80_000,
    catchUpTimeoutMs: 40_000,
  });
  try {
    expectEveryCheck(result);
  } catch (err) {
    // The whole report (every count, the run directory kept for the logs) goes with the failure.
    (err as Error).message += `\n\n${formatClusterCrash(result)}`;
    throw err;
  }

  // The same facts asked of PostgreSQL directly, not through the runner's bookkeeping.
  const c = result.pg as ClusterChecks;
  await withClient(result.databaseUrl, async (client) => {
    const one = async (sql: string): Promise<unknown> => Object.values((await client.query(sql)).rows[0])[0];
    expect(await one("SELECT count(*)::int FROM events WHERE status <> 'done'")).toBe(0);
    expect(await one('SELECT count(*)::int FROM events')).toBe(c.events);
    expect(await one('SELECT count(*)::int FROM proposal_transitions')).toBe(c.events);
    expect(await one('SELECT count(DISTINCT replica)::int FROM deliveries')).toBe(3);
    expect(await one('SELECT coalesce(sum(duplicates), 0)::int FROM events')).toBe(c.duplicatesSum);
    // The outbox: one proposal.changed per transition, every delivery delivered.
    expect(await one("SELECT count(*)::int FROM forward_messages WHERE type = 'proposal.changed'")).toBe(
      c.events,
    );
    expect(
      await one(
        'SELECT count(*)::int FROM proposal_transitions t LEFT JOIN forward_messages m ON m.event_id = t.event_id WHERE m.id IS NULL',
      ),
    ).toBe(0);
    expect(await one("SELECT count(*)::int FROM forward_deliveries WHERE status <> 'delivered'")).toBe(0);
    expect(await one('SELECT count(*)::int FROM forward_deliveries')).toBe(c.outboxMessages);
  });
}, 90_000);

function expectEveryCheck(result: ClusterCrashResult): void {
  // The load: re-sends reached replicas without a copy; the SIGKILL cut requests that were retried.
  expect(result.sent).toBe(1500);
  expect(result.duplicatesSent).toBe(150);
  expect(result.crossReplicaDuplicates).toBeGreaterThan(result.duplicatesSent / 2);
  expect(result.networkErrors).toBeGreaterThan(0);
  expect(result.unanswered).toBe(0);
  expect(result.wrongAnswers).toBe(0);
  expect(result.ok200).toBe(result.sent - result.badSignaturesSent);
  expect(result.rejected401).toBe(result.badSignaturesSent);
  expect(result.maxAnswerMs).toBeLessThan(ANSWER_DEADLINE_MS);
  expect(Object.values(result.ok200ByReplica).every((n) => n > 0)).toBe(true);

  // During the PostgreSQL restart every replica kept answering 200 from its spool.
  expect(result.pgRestartRequests).toBeGreaterThan(0);
  expect(result.pgRestartNon200).toBe(0);
  expect(result.pgRestartNoAnswer).toBe(0);

  // Caught up, stopped cleanly, nobody crashed on the way.
  expect(result.catchUpTimedOut).toBe(false);
  expect(result.catchUpMs).not.toBeNull();
  expect(result.unexpectedExits).toEqual([]);
  expect(result.gracefulExitCodes).toEqual([0, 0, 0]);
  expect(result.spoolGaps).toEqual([]);
  expect(result.orderDependentPaths).toBe(0);

  const c = result.pg;
  if (c === null) throw new Error('no PostgreSQL checks');
  // Every 200 is exactly one event; nothing else is stored.
  expect(c.acknowledgedKeys).toBe(result.firstSends);
  expect(c.storedAcknowledged).toBe(c.acknowledgedKeys);
  expect(c.lost).toBe(0);
  expect(c.events).toBe(c.acknowledgedKeys + c.storedWithoutAck);
  expect(c.badSignaturesStored).toBe(0);
  expect(c.unexpectedStored).toBe(0);
  expect(c.eventMismatches).toBe(0);
  // duplicates: at least the copies acknowledged beyond the first, at most those plus the requests
  // whose answer was lost in the SIGKILL (stored or not, nobody knows); exactly each event's stored copies − 1.
  expect(c.ackedExtraCopies).toBeGreaterThanOrEqual(result.crossReplicaDuplicates);
  expect(c.duplicatesSum).toBeGreaterThanOrEqual(c.ackedExtraCopies);
  expect(c.duplicatesSum).toBeLessThanOrEqual(c.ackedExtraCopies + c.unansweredSignedRequests);
  expect(c.duplicateRowMismatches).toBe(0);
  // Processed once each.
  expect(c.notDone).toBe(0);
  expect(c.transitionsNotOne).toBe(0);
  expect(c.processedTwice).toBe(0);
  expect(c.strayTransitions).toBe(0);
  expect(c.transitions).toBe(c.events);
  // Per-proposal order, and the states the pure life cycle gives.
  expect(c.orderViolations).toBe(0);
  expect(c.stateMismatches).toBe(0);
  expect(c.endStateMismatches).toBe(0);
  expect(c.proposalRowMismatches).toBe(0);
  // Every replica's deliveries relayed.
  expect(c.relayGaps).toEqual([]);
  expect(Object.values(c.deliveriesByReplica).every((n) => n > 0)).toBe(true);

  expectForwarding(result, c);

  // Anything the checks above did not name.
  expect(result.failures).toEqual([]);
}

function expectForwarding(result: ClusterCrashResult, c: ClusterChecks): void {
  // The SIGKILL hit the replica sending the destination, with requests the destination had received
  // (its answers held until then); another replica (or it, restarted) took over and sent each again.
  expect(result.forwardHolderKilled).toBe(true);
  expect(result.forwardHeldAtKill).toBeGreaterThan(0);
  expect(result.forwardHeldNotResent).toBe(0);
  expect(result.forwardTakeoverMs).not.toBeNull();
  expect(result.forwardTimedOut).toBe(false);
  // Outbox: exactly one proposal.changed per transition, none twice for an event, in processing order.
  expect(c.proposalChangedMessages).toBe(c.transitions);
  expect(c.outboxMessages).toBe(c.proposalChangedMessages);
  expect(c.outboxDuplicateTypes).toBe(0);
  expect(c.outboxMismatches).toBe(0);
  expect(c.outboxOrderViolations).toBe(0);
  // Every delivery delivered, none dead.
  expect(c.forwardDelivered).toBe(c.outboxMessages);
  expect(c.forwardPending).toBe(0);
  expect(c.forwardDead).toBe(0);
  expect(c.forwardMissingRows).toBe(0);
  // At least once: every message received, nothing else; re-sends (same webhook-id) allowed.
  expect(c.forwardLost).toBe(0);
  expect(c.forwardUnknown).toBe(0);
  expect(c.forwardReceivedIds).toBe(c.outboxMessages);
  expect(c.forwardReceived).toBe(c.forwardReceivedIds + c.forwardResentCopies);
  expect(c.forwardPhantomAttempts).toBe(0);
  // Order per proposal, by first arrival; signed; the body is its message, CPF masked.
  expect(c.forwardOrderSamples).toEqual([]);
  expect(c.forwardOrderViolations).toBe(0);
  expect(c.forwardSignatureSamples).toEqual([]);
  expect(c.forwardBadSignatures).toBe(0);
  expect(c.forwardBodyMismatches).toBe(0);
  expect(c.forwardCpfUnmasked).toBe(0);
}
