import { formatDuration, parseDuration } from './duration';
import { FINAL_STATUSES, NON_FINAL_STATUSES, type NonFinalStatus, type ProposalStatus } from './lifecycle';

/**
 * Stuck proposals (issue 12, item 2): a proposal that has sat at a non-final status for longer than
 * that status's age limit is stuck, and someone at the lender should look at it. "Age" is the time
 * since the proposal last changed (`proposals.updated_at`, which every event recorded for it moves,
 * even one that arrived late and did not change its status). Final statuses (negada, cancelada,
 * averbacao_negada, paga) are never stuck. Pure: the clock and the limits are passed in.
 *
 * Timestamps are ISO 8601 UTC strings as `Date#toISOString()` writes them (`2024-05-01T12:00:00.000Z`),
 * the format `proposals.updated_at` is stored in: their text order is their time order, so SQL's
 * `updated_at < ?` and {@link isStuck} compare the same way and never disagree.
 */

const DAY = 86_400_000;

/** Age limit per non-final status, in milliseconds; null = never stuck (`off`). */
export type StuckLimits = Readonly<Record<NonFinalStatus, number | null>>;

/**
 * The limits an operations lead at a lender would start from, in calendar days (the domain has no
 * business calendar): a step that waits on a business-day operation gets 3 days, so a Friday
 * evening is not stuck on Monday morning.
 */
export const DEFAULT_STUCK_AFTER: StuckLimits = Object.freeze({
  // Credit analysis is automated on the service's side: pre-approval or refusal normally comes within
  // minutes. A day without either means the analysis hangs or its webhook was lost.
  em_analise: 1 * DAY,
  // Waiting for the borrower to accept the pre-approved offer; people take a weekend to decide.
  pre_aprovada: 3 * DAY,
  // Approved, but averbação never requested: that request is the lender's own next step, and the
  // payroll margin checked at approval will not stay free forever.
  aprovada: 3 * DAY,
  // The registry answers within hours; 2 days is REGISTRY_POLL_MAX_AGE_MS's default, when the poller
  // gives up and marks the registration stale.
  averbacao_solicitada: 2 * DAY,
  // The margin is reserved at the employer but signing has not started: the borrower's margin is
  // blocked for a loan that may never be signed.
  averbada: 3 * DAY,
  // The signing link was sent and never completed. Borrowers take days, but after a week the link
  // has likely expired or been forgotten: someone should call.
  formalizacao_iniciada: 7 * DAY,
  // Signed but not booked (efetivação is a back-office step): beyond a weekend something is wrong.
  formalizada: 3 * DAY,
  // Booked, no payment: disbursement is normally the next business day, and a borrower with a debt
  // and no money is a complaint in the making.
  efetivada: 3 * DAY,
  // The disbursement failed (wrong bank data, closed account): it needs the borrower's new data and a
  // retry within a day or two.
  pagamento_falhou: 2 * DAY,
});

/** Ten years: more is a typo, and it keeps `now - limit` far inside what a Date can hold. */
const MAX_LIMIT_MS = 3650 * DAY;

function isStuckStatus(status: string): status is NonFinalStatus {
  return (NON_FINAL_STATUSES as readonly string[]).includes(status);
}

/** `90m`, `36h`, `5d` → milliseconds; `off` → null; throws RangeError naming `status` and the value. */
function parseLimit(status: string, value: string): number | null {
  if (value.toLowerCase() === 'off') return null;
  const ms = parseDuration(value);
  if (ms === null || ms > MAX_LIMIT_MS) {
    throw new RangeError(
      `${status}: expected a duration from 1m to 3650d such as 90m, 36h or 5d, or off, got "${value}"`,
    );
  }
  return ms;
}

/**
 * Reads `STUCK_AFTER`: comma-separated `status=duration` pairs (units `m`, `h`, `d`; `off` to never
 * mark that status stuck) over `defaults`, e.g. `averbacao_solicitada=36h,formalizacao_iniciada=5d,aprovada=off`.
 * Undefined or blank gives `defaults`. Throws one RangeError naming the bad entry: an unknown or
 * final status, a bad duration, a status given twice.
 */
export function parseStuckAfter(
  text: string | undefined,
  defaults: StuckLimits = DEFAULT_STUCK_AFTER,
): StuckLimits {
  const limits: Record<NonFinalStatus, number | null> = { ...defaults };
  if (text === undefined) return Object.freeze(limits);
  const seen = new Set<string>();
  for (const entry of text.split(',')) {
    const item = entry.trim();
    if (item === '') continue;
    const eq = item.indexOf('=');
    if (eq < 0)
      throw new RangeError(`expected status=duration (e.g. averbacao_solicitada=36h), got "${item}"`);
    const status = item.slice(0, eq).trim();
    const value = item.slice(eq + 1).trim();
    if (!isStuckStatus(status)) {
      throw new RangeError(
        FINAL_STATUSES.has(status as ProposalStatus)
          ? `${status} is a final status: it is never stuck`
          : `unknown status "${status}" (expected one of ${NON_FINAL_STATUSES.join(', ')})`,
      );
    }
    if (seen.has(status)) throw new RangeError(`${status} is given twice`);
    seen.add(status);
    limits[status] = parseLimit(status, value);
  }
  return Object.freeze(limits);
}

/** The age limit of `status` in ms; null when it has none (final, `off`, or not a status at all). */
export function limitOf(status: string, limits: StuckLimits): number | null {
  return isStuckStatus(status) ? limits[status] : null;
}

/** The `updated_at` below which a proposal is older than `limit` at `now`. */
function cutoff(limit: number, now: Date): string {
  return new Date(now.getTime() - limit).toISOString();
}

/** For one status: a proposal at it is stuck when its `updated_at` is before `before` (ISO time). */
export interface StuckCutoff {
  status: NonFinalStatus;
  before: string;
}

/**
 * Per status with a limit, in contract §6 order: the `updated_at` below which a proposal is stuck at
 * `now`. What the store's `status = ? AND updated_at < ?` queries take.
 */
export function stuckCutoffs(limits: StuckLimits, now: Date): StuckCutoff[] {
  return NON_FINAL_STATUSES.flatMap((status) => {
    const limit = limits[status];
    return limit === null ? [] : [{ status, before: cutoff(limit, now) }];
  });
}

/** The part of a `proposals` row these rules read. */
export interface AgedProposal {
  status: string;
  /** ISO 8601 UTC, as stored. */
  updated_at: string;
}

/** Whether `row` is stuck at `now`: its status has a limit and it has not changed for longer than that. */
export function isStuck(row: AgedProposal, limits: StuckLimits, now: Date): boolean {
  const limit = limitOf(row.status, limits);
  return limit !== null && row.updated_at < cutoff(limit, now);
}

/**
 * When `row` becomes (or became) stuck: its last change plus its status's limit, as ISO time; null
 * when its status has no limit or `updated_at` is not a time.
 */
export function stuckSince(row: AgedProposal, limits: StuckLimits): string | null {
  const limit = limitOf(row.status, limits);
  const changed = Date.parse(row.updated_at);
  return limit === null || Number.isNaN(changed) ? null : new Date(changed + limit).toISOString();
}

/** A limit as `STUCK_AFTER` writes it (`36h`, `2d`, `90m`); `off` for none. */
export function formatLimit(ms: number | null): string {
  return ms === null ? 'off' : formatDuration(ms);
}
