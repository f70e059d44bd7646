import { createHmac } from 'node:crypto';
import { type DeliveryAlarmState, silenceDue } from './delivery-alarm';
import type { DestinationSummary } from './forwarding/admin';
import type { Destination } from './forwarding/destinations';
import { maskCpfsInText } from './privacy';
import type { StuckCutoff } from './stuck';

/**
 * The operator console's shapes and rules (contract §9), one home for both stores: the console's
 * store, written once for the SQLite file and PostgreSQL in cluster mode (src/core/console-*.ts).
 * Rows are given in the SQLite log's representation (ISO-8601 text times, 0/1 flags, an integer
 * `nu_proposta` as a number), so that one set of pages renders either. Pure.
 */

/**
 * Who signed in through the lender's identity provider, as the session keeps them: never a token
 * (domain/oidc.ts reads it from the claims).
 */
export interface Person {
  /** `sub`: the provider's stable id of the person. */
  subject: string;
  /** `name` (else `preferred_username`), null when the provider gave none. */
  name: string | null;
  /** `email`, null when the provider gave none or did not say it verified it (`email_verified`). */
  email: string | null;
}

// ---- events lists --------------------------------------------------------------------------------

/** Rows of the driving index examined per page when a condition has no index. */
export const SCAN_CAP = 50_000;
/** The same when the body is matched (each row's JSON is parsed). */
export const JSON_SCAN_CAP = 10_000;

/**
 * One leaf of a partial-JSON filter: the value at a path of object keys equals `value`. `path` is
 * the SQLite JSON path with every key quoted (`$."dados"."no_conveniada"`), `keys` the same path as
 * a list (PostgreSQL's `#>`).
 */
export interface JsonLeaf {
  path: string;
  keys: readonly string[];
  value: string | number | boolean | null;
}

export interface ConsoleEventFilter {
  status?: string | undefined;
  evento?: string | undefined;
  kind?: string | undefined;
  nuProposta?: number | string | undefined;
  /** ISO instants: `from` inclusive, `to` exclusive. */
  from?: string | undefined;
  to?: string | undefined;
  json?: readonly JsonLeaf[] | undefined;
  /** Keyset: ids below this one. */
  before?: number | undefined;
  /** @default 50 */
  limit?: number | undefined;
  /**
   * Rows examined per page for the conditions without an index.
   * @default SCAN_CAP, or JSON_SCAN_CAP with a JSON match (tests lower it)
   */
  scanCap?: number | undefined;
}

export interface ListPage<T> {
  rows: T[];
  /** The `before` of the next page; null when there is none. */
  next: number | null;
  /**
   * The window of a condition without an index ended before the page was full: rows with an id
   * below this one were not examined (`next` goes on from there). null when the search was complete.
   */
  stoppedAt: number | null;
}

/** The deliveries list's filter: outcome, the time range (`from` inclusive, `to` exclusive), keyset. */
export interface ConsoleDeliveryFilter {
  outcome?: string | undefined;
  from?: string | undefined;
  to?: string | undefined;
  before?: number | undefined;
  /** @default 50 */
  limit?: number | undefined;
}

/** Whether the filter has a condition no index serves (checked inside a window of the driving index). */
export function hasUnindexedCondition(f: ConsoleEventFilter): boolean {
  return f.evento !== undefined || f.kind !== undefined || (f.json?.length ?? 0) > 0;
}

/** Rows a page may examine for its conditions without an index: fewer when bodies are parsed. */
export function scanCapFor(f: ConsoleEventFilter): number {
  return f.scanCap ?? ((f.json?.length ?? 0) > 0 ? JSON_SCAN_CAP : SCAN_CAP);
}

/** A page of `limit` rows out of up to `limit + 1` read: `next` is the last row's id when there are more. */
export function pageOf<T extends { id: number }>(
  rows: T[],
  limit: number,
  stoppedAt: number | null,
): ListPage<T> {
  if (rows.length <= limit) return { rows, next: null, stoppedAt };
  const page = rows.slice(0, limit);
  return { rows: page, next: (page[page.length - 1] as T).id, stoppedAt };
}

/** A page of averbações out of up to `limit + 1` read: `next` is the last row's `rid` when there are more. */
export function averbacaoPage<T extends { rid: number }>(
  rows: T[],
  limit: number,
): { rows: T[]; next: number | null } {
  const { rows: page, next } = pageOf(
    rows.map((row) => ({ row, id: row.rid })),
    limit,
    null,
  );
  return { rows: page.map((p) => p.row), next };
}

/**
 * Where the window of a page ends (see core/console-reads.ts): `edge` counts the newest `cap + 1`
 * entries of the driving index below the cursor and gives the lowest of them. One past the window
 * says it was cut; ids from the one above it on are examined. undefined: the window holds them all.
 */
export function windowLow(
  edge: { n: number; low: number | null } | undefined,
  cap: number,
): number | undefined {
  return edge !== undefined && edge.n > cap && edge.low !== null ? edge.low + 1 : undefined;
}

/** The page from the rows read inside the window starting at `low` (undefined: no window). */
export function windowPage<T extends { id: number }>(
  rows: T[],
  limit: number,
  low: number | undefined,
): ListPage<T> {
  if (rows.length > limit || low === undefined) return pageOf(rows, limit, null);
  return { rows, next: low, stoppedAt: low };
}

// ---- the proposal page ---------------------------------------------------------------------------

/** Rows of each list of a proposal's story at most (a hostile sender must not make it unbounded). */
export const STORY_CAP = 1000;

/** An event of the proposal with the transition it caused (if it was processed). */
export interface StoryEventRow {
  id: number;
  kind: string;
  evento: string | null;
  request_id: string | null;
  received_at: string;
  status: string;
  attempts: number;
  last_error: string | null;
  processed_at: string | null;
  duplicates: number;
  last_duplicate_at: string | null;
  from_status: string | null;
  to_status: string | null;
  applied: number | null;
  reason: string | null;
  transition_at: string | null;
}

/** A registry answer (webhook or poll) about one of the proposal's averbações. */
export interface RegistryEventRow {
  id: number;
  kind: string;
  request_id: string;
  registry_status: string | null;
  received_at: string;
  status: string;
  duplicates: number;
}

/** A forwarded message and one of its deliveries (destination null: stored for the feed only). */
export interface StoryForwardRow {
  message_id: number;
  type: string;
  event_id: number;
  created_at: string;
  delivery_id: number | null;
  destination: string | null;
  status: string | null;
  attempts: number | null;
  last_status: number | null;
  last_error: string | null;
  delivered_at: string | null;
}

/** A proposal's averbações shown on its page at most. */
export const STORY_AVERBACOES = 20;

// ---- the proposals list --------------------------------------------------------------------------

/** Where a page of proposals ends: the last row's `updated_at` and `nu_proposta`. */
export interface ProposalKey {
  updated_at: string;
  nu_proposta: number | string;
}

/** The proposals list: by status, newest first (`before`), or past cutoffs, oldest first (`after`). */
export type ProposalListing =
  | { kind: 'latest'; statuses: readonly string[]; before?: ProposalKey | undefined; limit: number }
  | { kind: 'stuck'; cutoffs: readonly StuckCutoff[]; after?: ProposalKey | undefined; limit: number };

// ---- averbações and the overview's counts --------------------------------------------------------

/** Counts stop here: the overview says "at least", and a huge backlog costs no more than this. */
export const COUNT_CAP = 100_000;

export interface ConsoleAverbacaoFilter {
  status?: string | undefined;
  stale?: boolean | undefined;
  /** Only registrations still polled (`next_poll_at` set). */
  waiting?: boolean | undefined;
  before?: number | undefined;
  /** @default 50 */
  limit?: number | undefined;
}

// ---- the overview --------------------------------------------------------------------------------

export interface OverviewQuery {
  /** STUCK_AFTER's cutoffs now. */
  stuckCutoffs: readonly StuckCutoff[];
  /** DELIVERY_SILENCE_ALARM_MS: proposals in flight are counted once the silence is this long (0: off). */
  silenceMs: number;
  destinations: readonly Destination[];
}

export interface OverviewFigures {
  rollup: RollupResult;
  /** The rollup's hours of the last 7 days, oldest first. */
  hours: HourCount[];
  /** The latest request to a webhook route (any process on the file, any replica). */
  lastDeliveryAt: string | null;
  /** The run of failed answers the deactivation alarm counts. */
  run: DeliveryAlarmState;
  /** Proposals in flight; null when the silence is too short for them to matter (not counted). */
  inFlight: number | null;
  stuckByStatus: Record<string, number>;
  events: { pending: number; failed: number; dead: number; oldestUnprocessedAt: string | null };
  averbacoes: { waiting: number; staleWaiting: number };
  destinations: DestinationSummary[];
  /** Cluster mode: how far each replica's spool has been relayed (`relay_spools`); null in SQLite mode. */
  relaySpools: RelaySpoolRow[] | null;
}

/** One replica's spool as PostgreSQL last heard from its relay (migrations-pg/0002 `relay_spools`). */
export interface RelaySpoolRow {
  spool: string;
  replica: string;
  relayed_through: number;
  last_relayed_at: string;
  /** received_at of the newest delivery relayed: last_relayed_at minus this is the latest delay. */
  last_received_at: string | null;
}

/**
 * The overview's silence figures: the latest delivery (epoch ms, null: none) as ISO text, and the
 * proposals in flight, counted (`inFlight`) only once the silence is long enough to matter.
 */
export function silenceFigures(
  now: Date,
  last: number | null,
  query: Pick<OverviewQuery, 'silenceMs'>,
  inFlight: () => number,
): Pick<OverviewFigures, 'lastDeliveryAt' | 'inFlight'> {
  if (last === null) return { lastDeliveryAt: null, inFlight: null };
  const due = silenceDue(now.getTime(), last, query.silenceMs);
  return { lastDeliveryAt: new Date(last).toISOString(), inFlight: due ? inFlight() : null };
}

/** `hours` of {@link OverviewFigures}: the rollup's hours from this one on. */
export function overviewSinceHour(now: Date): string {
  return hourOf(now.getTime() - 7 * 86_400_000);
}

// ---- the hourly delivery rollup ------------------------------------------------------------------

/** Deliveries counted per rollup call at most: a first view of a long log catches up over a few views. */
export const ROLLUP_CHUNK_ROWS = 50_000;
/** Hours kept: the overview shows 7 days. */
export const ROLLUP_KEEP_MS = 8 * 86_400_000;
/** The rollup's row in `console_rollup_state`. */
export const ROLLUP_STATE = 'deliveries';

export interface HourCount {
  /** `2026-11-21T13`: the UTC hour, as `received_at` begins. */
  hour: string;
  outcome: string;
  n: number;
}

export interface RollupResult {
  /** Deliveries above the watermark left uncounted after this call (0 once caught up). */
  behind: number;
  /** The write was refused (another connection held the lock): what is shown may be behind. */
  locked: boolean;
}

/** `2026-11-21T13` for an instant. */
export function hourOf(ms: number): string {
  return new Date(ms).toISOString().slice(0, 13);
}

/** Where the rollup stands: its watermark (null before the first update) and the newest delivery's id. */
export interface RollupPosition {
  last: number | null;
  top: number;
}

/** Whether an update has nothing to count (a page view then writes nothing). */
export function rollupCaughtUp({ last, top }: RollupPosition): boolean {
  return last !== null && last >= top;
}

/** What a page shows when another process holds the rollup: what is counted, and how far behind. */
export function rollupBusy({ last, top }: RollupPosition): RollupResult {
  return { behind: top - (last ?? 0), locked: true };
}

/** The rollup's window at `now`: its first instant (where a first update starts) and its first hour kept. */
export function rollupWindow(now: Date): { since: string; keepFrom: string } {
  const since = now.getTime() - ROLLUP_KEEP_MS;
  return { since: new Date(since).toISOString(), keepFrom: hourOf(since) };
}

/**
 * The ids one update counts, `from` (exclusive) to `to`, and how many it leaves: after the
 * watermark, or on a first update from the lowest id received in the window (`firstInWindow`,
 * null: none). The lowest id, not the first received: ids follow the commits, not the arrival, and
 * a request received earlier may be stored later.
 */
export function rollupStep(
  { last, top }: RollupPosition,
  firstInWindow: number | null,
): { from: number; to: number; behind: number } {
  const from = last ?? (firstInWindow ?? top + 1) - 1;
  const to = Math.min(top, from + ROLLUP_CHUNK_ROWS);
  return { from, to, behind: top - to };
}

// ---- sessions and the audit table ----------------------------------------------------------------

export type ConsoleRole = 'admin' | 'viewer';

export interface ConsoleSessionRow {
  id_hash: string;
  role: ConsoleRole;
  created_at: string;
  expires_at: string;
  last_seen: string;
  /** The fingerprint of the token that opened it ({@link tokenFingerprint}); null before migration 0011. */
  token_fp: string | null;
  /** Signed in through the identity provider (migration 0013): the person; null for a token's session. */
  subject: string | null;
  name: string | null;
  email: string | null;
}

export interface NewConsoleSession {
  idHash: string;
  role: ConsoleRole;
  now: string;
  expiresAt: string;
  /** The token's fingerprint, or the provider's ({@link oidcFingerprint}) for a person's session. */
  tokenFp: string;
  /** The person signed in through the identity provider; null or absent for a token's session. */
  person?: Person | null;
}

/**
 * Which token opened a session, stored with it: HMAC-SHA256 keyed by the token, hex. Never the token,
 * and a copy of the database does not give it back; the same token always gives the same value, so a
 * rotated or removed token is known by its fingerprint no longer being a configured one.
 */
export function tokenFingerprint(token: string): string {
  return createHmac('sha256', token).update('consig-receiver console session').digest('hex');
}

/** The fingerprint of each role's configured token; null for a role whose token is not set. */
export interface TokenFingerprints {
  admin: string | null;
  viewer: string | null;
  /** The identity provider's ({@link oidcFingerprint}); null or absent without one. */
  oidc?: string | null;
}

/** The settings a person's session was opened under: the provider, the client, and the groups. */
export interface OidcSessionSettings {
  issuer: string;
  clientId: string;
  groupsClaim: string;
  adminGroups: readonly string[];
  viewerGroups: readonly string[];
}

/**
 * What a session opened through the identity provider carries in `token_fp`: the issuer, the client
 * id and the group settings (OIDC_GROUPS_CLAIM, OIDC_ADMIN_GROUPS, OIDC_VIEWER_GROUPS, each list in
 * any order), keyed as a token's fingerprint is. Another provider or client, or other groups,
 * configured ends those sessions as a rotated token ends its own (issue 44): a role is never kept
 * under settings that would not give it now.
 */
export function oidcFingerprint(oidc: OidcSessionSettings): string {
  const groups = (g: readonly string[]) => [...g].sort();
  const settings = [
    oidc.issuer,
    oidc.clientId,
    oidc.groupsClaim,
    groups(oidc.adminGroups),
    groups(oidc.viewerGroups),
  ];
  return tokenFingerprint(`oidc ${JSON.stringify(settings)}`);
}

/**
 * The fingerprints of what may open a console session now: the identity provider when one is
 * configured, and the tokens — unless the provider is, without break-glass: then the tokens sign no
 * one in to the console and the sessions they opened end.
 */
export function consoleFingerprints(c: {
  adminToken: string | undefined;
  viewerToken: string | undefined;
  oidc: (OidcSessionSettings & { breakGlass: boolean }) | null;
}): TokenFingerprints {
  const tokens = consoleTokens(c);
  return { ...tokenFingerprints(tokens), oidc: c.oidc === null ? null : oidcFingerprint(c.oidc) };
}

/** The tokens that sign in to the console: none while the identity provider is, without break-glass. */
export function consoleTokens(c: {
  adminToken: string | undefined;
  viewerToken: string | undefined;
  oidc: { breakGlass: boolean } | null;
}): { admin: string | undefined; viewer: string | undefined } {
  if (c.oidc !== null && !c.oidc.breakGlass) return { admin: undefined, viewer: undefined };
  return { admin: c.adminToken, viewer: c.viewerToken };
}

export function tokenFingerprints(tokens: {
  admin: string | undefined;
  viewer: string | undefined;
}): TokenFingerprints {
  return {
    admin: tokens.admin === undefined ? null : tokenFingerprint(tokens.admin),
    viewer: tokens.viewer === undefined ? null : tokenFingerprint(tokens.viewer),
  };
}

/** Whether a session was opened by the token its role has now (rotated, removed or unknown: no). */
export function sessionTokenCurrent(
  row: Pick<ConsoleSessionRow, 'role' | 'token_fp'>,
  fps: TokenFingerprints,
): boolean {
  if (typeof fps.oidc === 'string' && row.token_fp === fps.oidc) return true;
  const current = fps[row.role];
  return current !== null && row.token_fp === current;
}

export const AUDIT_ACTIONS = [
  'replay_event',
  'replay_bulk',
  'forward_replay',
  'forward_replay_bulk',
  'forward_pause',
  'forward_resume',
  'sign_in',
  // A token's sign-in while the identity provider is configured (CONSOLE_BREAK_GLASS=true).
  'sign_in_break_glass',
  'sign_out',
  'sign_in_failed',
  // A person the provider vouched for, in neither group: no session.
  'sign_in_refused',
  'end_sessions',
  // `report --full-cpf`: a portfolio report printed with its CPFs in full (a command, issue 45).
  'report_full_cpf',
  'refused',
  // The people in the data (issue 45): a person looked up, their data exported, erased.
  'subject_find',
  'subject_export',
  'subject_erase',
  // Reads of personal data (LGPD, issue 45): an /admin GET serving a body or a proposal, the change
  // feed, and the console's event and proposal pages.
  'admin_read',
  'feed_read',
  'console_read',
] as const;
export type AuditAction = (typeof AUDIT_ACTIONS)[number];

export interface NewAuditEntry {
  at: string;
  /** null for a failed sign-in (no one is known). */
  role: ConsoleRole | null;
  /** The session's short tag (never its id); null when there is no session. */
  session: string | null;
  /** The person (e-mail, else subject) signed in through the identity provider; null or absent for a token. */
  person?: string | null;
  action: AuditAction;
  target: string | null;
  /** Stored as JSON with any CPF in it masked (a filter may name one): the filter used, how many rows. */
  detail: Record<string, unknown> | null;
  ip: string | null;
}

/** Why a console request was refused (contract §9): a `refused` row of the audit table. */
export const REFUSAL_REASONS = ['csrf', 'origin', 'role', 'throttled'] as const;
export type RefusalReason = (typeof REFUSAL_REASONS)[number];

/** Repeats of one refusal within this window add to one row. */
export const REFUSAL_WINDOW_MS = 3_600_000;
/**
 * Distinct refusal rows per window at most; past it, the rest of the window's refusals are counted
 * in one row per reason (target `*`, no address or session). So refusals add at most this many rows
 * plus four an hour, whatever an attacker sends.
 */
export const REFUSAL_ROWS_PER_WINDOW = 200;

/** A refused request: who (a session's role and tag, or null: anonymous), which route, why. */
export interface NewRefusal {
  at: string;
  role: ConsoleRole | null;
  session: string | null;
  /** The session's person (see {@link NewAuditEntry}); null or absent for a token's session or none. */
  person?: string | null;
  /** `POST /console/events/12/replay`, at most {@link MAX_ROUTE_CHARS} characters. */
  route: string;
  reason: RefusalReason;
  ip: string | null;
}

export const MAX_ROUTE_CHARS = 200;

/** Where a refusal's aggregation window starts: the UTC hour of `at`. */
export function refusalWindowStart(at: string): string {
  const ms = Date.parse(at);
  return new Date(ms - (ms % REFUSAL_WINDOW_MS)).toISOString();
}

/** The row a refusal adds to once the window's cap is reached: one per reason, no address or session. */
export function overflowRefusal(r: NewRefusal): NewRefusal {
  return { ...r, role: null, session: null, person: null, route: '*', ip: null };
}

/** What the audit table holds of a refusal's window (one read): see {@link refusalWrite}. */
export interface RefusalWindow {
  /** The newest row of the window for the same refusal, else null. */
  same: number | null;
  /** The newest overflow row of the window for its reason ({@link overflowRefusal}), else null. */
  overflow: number | null;
  /** Refusal rows in the window. */
  rows: number;
}

/**
 * Where a refusal is counted: added to the window's row for the same refusal (`times + 1`), else a
 * new row while the window has fewer than REFUSAL_ROWS_PER_WINDOW, else added to the window's
 * overflow row of its reason (a new one the first time). The newest row, should two processes have
 * raced: the count is then split, never lost.
 */
export function refusalWrite(r: NewRefusal, w: RefusalWindow): { add: number } | { insert: NewRefusal } {
  if (w.same !== null) return { add: w.same };
  if (w.rows < REFUSAL_ROWS_PER_WINDOW) return { insert: r };
  return w.overflow !== null ? { add: w.overflow } : { insert: overflowRefusal(r) };
}

export interface AuditRow {
  id: number;
  at: string;
  role: ConsoleRole | null;
  session: string | null;
  /** The person (e-mail, else subject); null for a token's session or none. */
  person: string | null;
  action: string;
  target: string | null;
  detail: string | null;
  ip: string | null;
  /** 'refused' for a refused attempt, else null. */
  outcome: string | null;
  reason: string | null;
  /** How many times this row happened (a refusal repeated within its window). */
  times: number;
  /** The latest of them (null: only `at`). */
  last_at: string | null;
}

/** The `detail` column of an audit entry: JSON, any CPF in it masked (LGPD). */
export function auditDetailText(detail: Record<string, unknown> | null): string | null {
  return detail === null ? null : maskCpfsInText(JSON.stringify(detail));
}
