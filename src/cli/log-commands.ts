import type { Config } from '../config';
import { formatAge } from '../domain/duration';
import { UsageError } from '../domain/errors';
import type { DestinationGauges } from '../domain/forwarding/sender-store';
import { PROPOSAL_STATUSES, isFinal, type ProposalStatus } from '../domain/lifecycle';
import { maskCpf, withMaskedCpf, withMaskedResultBody } from '../domain/privacy';
import { formatLimit, limitOf, stuckCutoffs, stuckSince } from '../domain/stuck';
import type { AverbacaoRow } from '../domain/log-rows';
import type { ProposalListRow } from '../core/proposal-lists';
import { parseNuProposta, type ProposalRow, type TimelineRow } from '../domain/log-rows';
import type { StoreFigures } from '../core/store-port';
import { type CommandSession, withCommandStore } from '../open-store';
import { renderTable } from './table';

/**
 * Read-only commands over the log: tables for people, `--json` for scripts. The log is the SQLite
 * file, or in cluster mode (`DATABASE_URL`, contract §10) the PostgreSQL database the replicas
 * share: each command reads it through the one port (core/store-port.ts, opened by src/open-store.ts), in the SQLite log's shapes,
 * and hands the rows to one renderer.
 */

export interface Output {
  out: (text: string) => void;
}

/** The read commands' session: one snapshot of the log (a read-only SQLite file). */
const READ: CommandSession = { access: 'read' };

/** `nu_proposta` as typed by a person, as the log holds it (`007` is `7`). */
function nuOf(value: string | undefined): number | string | undefined {
  return value === undefined ? undefined : parseNuProposta(value);
}

function parseLimit(value: string | undefined): number {
  if (value === undefined) return 50;
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 1 || n > 10000)
    throw new UsageError(`--limit expects an integer from 1 to 10000, got "${value}"`);
  return n;
}

/** Rows as JSON, or as a table of `columns`. */
function showRows<T extends object>(
  columns: readonly string[],
  rows: readonly T[],
  opts: { json?: boolean },
  io: Output,
): void {
  if (opts.json) return io.out(JSON.stringify(rows, null, 2));
  io.out(renderTable(columns, rows as unknown as Record<string, unknown>[]));
}

export interface EventsOptions {
  status?: string;
  evento?: string;
  proposal?: string;
  kind?: string;
  limit?: string;
  json?: boolean;
}

const EVENT_COLUMNS = [
  'id',
  'received_at',
  'kind',
  'evento',
  'nu_proposta',
  'request_id',
  'status',
  'attempts',
  'duplicates',
  'webhook_id',
  'last_error',
];

/** `events`: newest first. */
export async function eventsCommand(config: Config, opts: EventsOptions, io: Output): Promise<void> {
  const limit = parseLimit(opts.limit);
  const filter = {
    status: opts.status,
    evento: opts.evento,
    kind: opts.kind,
    nuProposta: nuOf(opts.proposal),
    limit,
  };
  showRows(EVENT_COLUMNS, await withCommandStore(config, READ, (log) => log.events(filter)), opts, io);
}

export interface DeliveriesOptions {
  outcome?: string;
  limit?: string;
  json?: boolean;
}

const DELIVERY_COLUMNS = [
  'id',
  'received_at',
  'path',
  'outcome',
  'http_status',
  'duration_ms',
  'event_id',
  'dedup_key',
  'detail',
];

/** `deliveries`: newest first. */
export async function deliveriesCommand(config: Config, opts: DeliveriesOptions, io: Output): Promise<void> {
  const filter = { outcome: opts.outcome, limit: parseLimit(opts.limit) };
  showRows(DELIVERY_COLUMNS, await withCommandStore(config, READ, (log) => log.deliveries(filter)), opts, io);
}

/** What `stats` shows, whichever database it read. */
interface LogStats {
  database: string;
  database_bytes: number;
  events_by_status: Record<string, number>;
  events_by_kind: Record<string, number>;
  duplicates_total: number;
  deliveries_by_outcome: Record<string, number>;
  proposals_by_status: Record<string, number>;
  /** STUCK_AFTER's statuses only (a final status is never stuck). */
  proposals_stuck_by_status: Record<string, number>;
  ack_ms_avg: number | null;
  ack_ms_max: number | null;
  last_delivery_at: string | null;
  /** Absent only in cluster mode on a database whose schema has no forwarding tables yet. */
  forwarding?: ForwardingFigures[];
  /** Cluster mode only: the deliveries each replica answered. */
  replicas?: StoreFigures['replicas'];
}

/** Said under the table when the PostgreSQL schema predates the forwarding tables (migrations-pg/0003). */
const NO_FORWARDING_TABLES =
  'forwarding: not shown (this PostgreSQL database has no forwarding tables yet: a replica of this version migrates it when it starts)';

function roundMs(ms: number | null): number | null {
  return ms === null ? null : Math.round(ms * 1000) / 1000;
}

/** `stats`: the figures of the log, read at once. */
export async function statsCommand(config: Config, opts: { json?: boolean }, io: Output): Promise<void> {
  const cutoffs = stuckCutoffs(config.stuckAfter, new Date());
  const destinations = config.forwarding.destinations.map((d) => d.name);
  const stats = await withCommandStore(config, READ, async (log) =>
    logStats(config, log.name, await log.stats(cutoffs, destinations)),
  );
  showStats(stats, opts, io);
}

function logStats(config: Config, database: string, s: StoreFigures): LogStats {
  return {
    database,
    database_bytes: s.databaseBytes,
    events_by_status: s.eventsByStatus,
    events_by_kind: s.eventsByKind,
    duplicates_total: s.duplicatesTotal,
    deliveries_by_outcome: s.deliveriesByOutcome,
    proposals_by_status: s.proposalsByStatus,
    proposals_stuck_by_status: s.proposalsStuckByStatus,
    ack_ms_avg: roundMs(s.ackMs.avg),
    ack_ms_max: s.ackMs.max,
    last_delivery_at: s.lastDeliveryAt,
    ...(s.forwarding === null ? {} : { forwarding: forwardingFigures(config, s.forwarding) }),
    ...(s.replicas === undefined ? {} : { replicas: s.replicas }),
  };
}

function showStats(stats: LogStats, opts: { json?: boolean }, io: Output): void {
  if (opts.json) return io.out(JSON.stringify(stats, null, 2));
  const section = (name: string, counts: Record<string, number>) =>
    Object.entries(counts).map(([key, value]) => ({ section: name, key, value }));
  const rows: Record<string, unknown>[] = [
    { section: 'database', key: 'path', value: stats.database },
    { section: 'database', key: 'bytes', value: stats.database_bytes },
    ...section('events by status', stats.events_by_status),
    ...section('events by kind', stats.events_by_kind),
    { section: 'events', key: 'duplicates received', value: stats.duplicates_total },
    ...section('deliveries by outcome', stats.deliveries_by_outcome),
    ...section('proposals by status', stats.proposals_by_status),
    { section: 'proposals', key: 'stuck (STUCK_AFTER)', value: stuckLine(stats.proposals_stuck_by_status) },
    { section: 'ack latency', key: 'avg ms', value: stats.ack_ms_avg },
    { section: 'ack latency', key: 'max ms', value: stats.ack_ms_max },
    { section: 'deliveries', key: 'last received', value: stats.last_delivery_at },
    ...(stats.replicas ?? []).map((r) => ({
      section: 'replicas',
      key: r.replica,
      value: `${r.deliveries} ${r.deliveries === 1 ? 'delivery' : 'deliveries'}, last received ${r.last_received_at ?? '-'}`,
    })),
    ...(stats.forwarding ?? []).flatMap((d) =>
      Object.entries(d)
        .filter(([key]) => key !== 'destination')
        .map(([key, value]) => ({ section: `forwarding ${d.destination}`, key, value })),
    ),
  ];
  io.out(renderTable(['section', 'key', 'value'], rows));
  if (stats.forwarding === undefined) io.out(NO_FORWARDING_TABLES);
}

/** One line: the statuses with stuck proposals and how many (`averbacao_solicitada=3, aprovada=1`), or `0`. */
function stuckLine(counts: Record<string, number>): string {
  const stuck = Object.entries(counts).filter(([, n]) => n > 0);
  return stuck.length === 0 ? '0' : stuck.map(([status, n]) => `${status}=${n}`).join(', ');
}

/** One destination's line in `stats`: backlog, dead letters, oldest waiting, paused (file or operator). */
interface ForwardingFigures {
  destination: string;
  pending: number;
  dead: number;
  oldest_pending_at: string | null;
  paused: boolean;
}

/** The figures `stats` shows of either store's gauges: paused by an operator or in the file. */
function forwardingFigures(config: Config, gauges: readonly DestinationGauges[]): ForwardingFigures[] {
  return gauges.map((g) => ({
    destination: g.destination,
    pending: g.pending,
    dead: g.dead,
    oldest_pending_at: g.oldest_pending_at,
    paused:
      g.paused === 1 || config.forwarding.destinations.some((d) => d.name === g.destination && d.paused),
  }));
}

/** `proposal <nu>`: where a proposal stands and every event it received, applied or not. */
export async function proposalCommand(
  config: Config,
  nu: string,
  opts: { json?: boolean },
  io: Output,
): Promise<void> {
  const key = parseNuProposta(nu);
  const { name, proposal, timeline } = await withCommandStore(config, READ, async (log) => ({
    name: log.name,
    ...(await log.proposal(key)),
  }));
  showProposal(name, nu, proposal, timeline, opts, io);
}

/** Where a proposal stands and every event it received, applied or not; UsageError when it has none. */
function showProposal(
  logName: string,
  nu: string,
  proposal: ProposalRow | undefined,
  timeline: readonly TimelineRow[],
  opts: { json?: boolean },
  io: Output,
): void {
  if (!proposal && timeline.length === 0) throw new UsageError(`no proposal ${nu} in ${logName}`);
  const shown = proposal ? withMaskedCpf(proposal) : null;
  if (opts.json) return io.out(JSON.stringify({ proposal: shown, timeline }, null, 2));
  if (shown) {
    io.out(
      `proposal ${shown.nu_proposta}: ${shown.stage} / ${shown.status}` +
        `  (cpf ${shown.nu_cpf || '-'}, R$ ${shown.vl_emprestimo ?? '-'}, ${shown.no_conveniada ?? '-'}, updated ${shown.updated_at})`,
    );
  } else {
    io.out(`proposal ${nu}: events stored, none processed yet`);
  }
  io.out(
    renderTable(
      [
        'event_id',
        'received_at',
        'evento',
        'event_status',
        'from_status',
        'to_status',
        'applied',
        'reason',
        'duplicates',
        'last_error',
      ],
      timeline.map((t) => ({ ...t, applied: t.applied === null ? '' : t.applied ? 'yes' : 'no' })),
    ),
  );
}

export interface ProposalsOptions {
  status?: string;
  stuck?: boolean;
  limit?: string;
  json?: boolean;
}

/** `proposals [--status S] [--stuck] [--limit N]`: where proposals stand and for how long. */
export async function proposalsCommand(config: Config, opts: ProposalsOptions, io: Output): Promise<void> {
  const { statuses, limit } = parseProposalsOptions(config, opts);
  const now = new Date();
  const cutoffs = stuckCutoffs(config.stuckAfter, now).filter((c) => statuses.includes(c.status));
  const rows = await withCommandStore(config, READ, (log) =>
    opts.stuck ? log.stuckProposals(cutoffs, limit) : log.latestProposals(statuses, limit),
  );
  showProposals(config, rows, now, opts, io);
}

/** The statuses `proposals` lists and how many; UsageError for what can never be listed. */
function parseProposalsOptions(
  config: Config,
  opts: ProposalsOptions,
): { statuses: ProposalStatus[]; limit: number } {
  const limit = parseLimit(opts.limit);
  if (opts.status === undefined) return { statuses: [...PROPOSAL_STATUSES], limit };
  const status = PROPOSAL_STATUSES.find((s) => s === opts.status);
  if (status === undefined)
    throw new UsageError(`--status expects one of ${PROPOSAL_STATUSES.join(', ')}, got "${opts.status}"`);
  // Asking for what can never be listed is a mistake worth saying, not an empty list that reads "none stuck".
  if (opts.stuck && isFinal(status)) throw new UsageError(`--stuck: ${status} is final, never stuck`);
  if (opts.stuck && limitOf(status, config.stuckAfter) === null)
    throw new UsageError(`--stuck: ${status} has no age limit (STUCK_AFTER ${status}=off)`);
  return { statuses: [status], limit };
}

/** Proposals with their CPF masked and their age at `now`; `--stuck` adds when and at what limit. */
function showProposals(
  config: Config,
  rows: readonly ProposalListRow[],
  now: Date,
  opts: ProposalsOptions,
  io: Output,
): void {
  const shown = rows.map((r) => {
    const base = {
      ...r,
      nu_cpf: maskCpf(r.nu_cpf),
      age_seconds: Math.floor((now.getTime() - Date.parse(r.updated_at)) / 1000),
    };
    if (!opts.stuck) return base;
    const stuckAfter = formatLimit(limitOf(r.status, config.stuckAfter));
    return { ...base, stuck_since: stuckSince(r, config.stuckAfter), stuck_after: stuckAfter };
  });
  if (opts.json) return io.out(JSON.stringify(shown, null, 2));
  const columns = ['nu_proposta', 'nu_cpf', 'stage', 'status', 'last_evento', 'updated_at', 'age'];
  io.out(
    renderTable(
      opts.stuck ? [...columns, 'stuck_since', 'stuck_after'] : columns,
      shown.map((r) => ({ ...r, age: formatAge(r.age_seconds * 1000) })),
    ),
  );
}

export interface AverbacoesOptions {
  status?: string;
  stale?: boolean;
  proposal?: string;
  limit?: string;
  json?: boolean;
}

/** `averbacoes [--status S] [--stale] [--proposal N]`: tracked registrations and their polling. */
export async function averbacoesCommand(config: Config, opts: AverbacoesOptions, io: Output): Promise<void> {
  const filter = {
    status: opts.status,
    stale: opts.stale ? true : undefined,
    nuProposta: nuOf(opts.proposal),
    limit: parseAverbacoesOptions(opts),
  };
  showAverbacoes(await withCommandStore(config, READ, (log) => log.averbacoes(filter)), opts, io);
}

/** Checks `--status`; returns `--limit`. */
function parseAverbacoesOptions(opts: AverbacoesOptions): number {
  if (opts.status && !['queued', 'processing', 'completed', 'error'].includes(opts.status)) {
    throw new UsageError(`--status expects queued, processing, completed or error, got "${opts.status}"`);
  }
  return parseLimit(opts.limit);
}

/** Tracked registrations: status, where the result came from, polling. */
function showAverbacoes(rows: readonly AverbacaoRow[], opts: { json?: boolean }, io: Output): void {
  // The registry's answers are the service's text: any CPF in them masked (contract §5).
  if (opts.json) return io.out(JSON.stringify(rows.map(withMaskedResultBody), null, 2));
  io.out(
    renderTable(
      [
        'request_id',
        'nu_proposta',
        'status',
        'result_source',
        'stale',
        'poll_attempts',
        'next_poll_at',
        'last_poll_outcome',
        'created_at',
        'completed_at',
      ],
      rows.map((r) => ({ ...r, stale: r.stale ? 'yes' : '' })),
    ),
  );
}
