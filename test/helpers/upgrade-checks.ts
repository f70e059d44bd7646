import type { Client } from 'pg';
import { checkProposals, snapshot } from './failover-checks';
import type { Load } from './failover-load';

/**
 * The checks of the upgrade tier (issue 46 item 5), on PostgreSQL after everything drained: the
 * columns of the table, from what the service was answered and what PostgreSQL holds.
 * Every column but the requests must be 0; keep-alive resets retried at once are counted apart
 * (failover-load.ts `keepAliveRace`: HTTP keep-alive's race, which the client retries).
 */

export interface UpgradeFigures {
  /** Requests answered (keep-alive resets retried at once aside), and those resets. */
  requests: number;
  keepAliveRaces: number;
  /** Answers other than 200, and of them those without an answer (reset, refused, timed out). */
  non200: number;
  noAnswer: number;
  /** The slowest answer (interface §6.1, rule 2: within 5 seconds). */
  worstAnswerMs: number;
  /** Deliveries answered 200, and those of them missing from PostgreSQL's events. */
  acknowledged: number;
  ackedLost: number;
  /** Transitions recorded without moving their proposal (a late or repeated event), events not done. */
  transitionsNotApplied: number;
  notDone: number;
  /** Proposals created from a later event or ending at another status than the last answered 200. */
  outOfOrder: number;
  createdFromLater: number;
  wrongEndStatus: number;
  /** Proposals with an event answered 200. */
  proposals: number;
}

export async function checkUpgrade(client: Client, load: Load): Promise<UpgradeFigures> {
  const s = await snapshot(client);
  const { rows } = await client.query<{ n: string }>(
    'SELECT count(*)::text AS n FROM proposal_transitions WHERE NOT applied',
  );
  const answers = load.answers.filter((a) => !a.keepAliveRace);
  const acked = [...load.sent.values()].filter((d) => d.ackedAt !== null);
  const p = checkProposals(s, load);
  return {
    requests: answers.length,
    keepAliveRaces: load.answers.length - answers.length,
    non200: answers.filter((a) => a.status !== 200).length,
    noAnswer: answers.filter((a) => a.status === 0).length,
    worstAnswerMs: Math.max(0, ...answers.map((a) => a.ms)),
    acknowledged: acked.length,
    ackedLost: acked.filter((d) => !s.events.has(d.key)).length,
    transitionsNotApplied: Number(rows[0]?.n ?? -1),
    notDone: [...s.events.values()].filter((e) => e.status !== 'done').length,
    outOfOrder: p.outOfOrder,
    createdFromLater: p.createdFromLater,
    wrongEndStatus: p.wrongEndStatus,
    proposals: p.proposals,
  };
}

/** The columns that must be 0. */
export function badColumns(f: UpgradeFigures): Record<string, number> {
  return {
    non200: f.non200,
    ackedLost: f.ackedLost,
    transitionsNotApplied: f.transitionsNotApplied,
    notDone: f.notDone,
    outOfOrder: f.outOfOrder,
  };
}

export const TABLE_HEADER = [
  '| run | requests (keep-alive resets retried) | non-200 | acked lost | transitions not applied / events not done | proposals out of order (created from a later event, wrong end status) |',
  '|---|---|---|---|---|---|',
].join('\n');

/** The scenario's row of the table. */
export function tableRow(run: string, f: UpgradeFigures): string {
  const cells = [
    run,
    `${f.requests} (${f.keepAliveRaces})`,
    f.noAnswer > 0 ? `${f.non200} (${f.noAnswer} without an answer)` : String(f.non200),
    `${f.ackedLost} of ${f.acknowledged}`,
    `${f.transitionsNotApplied} / ${f.notDone}`,
    `${f.outOfOrder} of ${f.proposals} (${f.createdFromLater}, ${f.wrongEndStatus})`,
  ];
  return `| ${cells.join(' | ')} |`;
}
