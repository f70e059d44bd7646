import { statSync } from 'node:fs';
import type { Config } from '../config';
import { StorageError, UsageError } from '../domain/errors';
import { stuckCutoffs } from '../domain/stuck';
import type { Db } from '../store/database';
import { forwardDeliveries } from '../store/forward-deliveries';
import { proposalLists } from '../store/proposal-lists';
import { openStore, type Store } from '../store/store';
import { renderTable } from './table';

/** Read-only commands over the SQLite log: tables for people, `--json` for scripts. */

export interface Output {
  out: (text: string) => void;
}

export function openReadOnly(config: Config): Store {
  try {
    statSync(config.databasePath);
  } catch {
    throw new StorageError(
      `no database at ${config.databasePath} (set DATABASE_PATH, or create it with \`consig-receiver migrate\`)`,
    );
  }
  return openStore(config.databasePath, { readonly: true, busyTimeoutMs: config.sqlite.busyTimeoutMs });
}

function withStore<T>(config: Config, fn: (store: Store) => T): T {
  const store = openReadOnly(config);
  try {
    return fn(store);
  } finally {
    store.close();
  }
}

function parseLimit(value: string | undefined): number {
  if (value === undefined) return 50;
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 1 || n > 10000)
    throw new UsageError(`--limit expects an integer from 1 to 10000, got "${value}"`);
  return n;
}

export interface EventsOptions {
  status?: string;
  evento?: string;
  proposal?: string;
  kind?: string;
  limit?: string;
  json?: boolean;
}

export function eventsCommand(config: Config, opts: EventsOptions, io: Output): void {
  const limit = parseLimit(opts.limit);
  withStore(config, (store) => {
    const rows = store.events.list({
      status: opts.status,
      evento: opts.evento,
      kind: opts.kind,
      nuProposta: opts.proposal,
      limit,
    });
    if (opts.json) return io.out(JSON.stringify(rows, null, 2));
    io.out(
      renderTable(
        [
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
        ],
        rows as unknown as Record<string, unknown>[],
      ),
    );
  });
}

export interface DeliveriesOptions {
  outcome?: string;
  limit?: string;
  json?: boolean;
}

export function deliveriesCommand(config: Config, opts: DeliveriesOptions, io: Output): void {
  const limit = parseLimit(opts.limit);
  withStore(config, (store) => {
    const rows = store.deliveries.list({ outcome: opts.outcome, limit });
    if (opts.json) return io.out(JSON.stringify(rows, null, 2));
    io.out(
      renderTable(
        [
          'id',
          'received_at',
          'path',
          'outcome',
          'http_status',
          'duration_ms',
          'event_id',
          'dedup_key',
          'detail',
        ],
        rows as unknown as Record<string, unknown>[],
      ),
    );
  });
}

function fileBytes(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

export function statsCommand(config: Config, opts: { json?: boolean }, io: Output): void {
  withStore(config, (store) => {
    const latency = store.deliveries.ackLatency();
    const stats = {
      database: config.databasePath,
      database_bytes: fileBytes(config.databasePath) + fileBytes(`${config.databasePath}-wal`),
      events_by_status: store.events.countByStatus(),
      events_by_kind: store.events.countByKind(),
      duplicates_total: store.events.duplicatesTotal(),
      deliveries_by_outcome: store.deliveries.countByOutcome(),
      proposals_by_status: store.proposals.countByStatus(),
      // STUCK_AFTER's statuses only (a final status is never stuck).
      proposals_stuck_by_status: proposalLists(store.db).stuckCounts(
        stuckCutoffs(config.stuckAfter, new Date()),
      ),
      ack_ms_avg: latency.avg === null ? null : Math.round(latency.avg * 1000) / 1000,
      ack_ms_max: latency.max,
      last_delivery_at: store.deliveries.lastReceivedAt(),
      forwarding: forwardingStats(config, store.db),
    };
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
      ...stats.forwarding.flatMap((d) =>
        Object.entries(d)
          .filter(([key]) => key !== 'destination')
          .map(([key, value]) => ({ section: `forwarding ${d.destination}`, key, value })),
      ),
    ];
    io.out(renderTable(['section', 'key', 'value'], rows));
  });
}

/** One line: the statuses with stuck proposals and how many (`averbacao_solicitada=3, aprovada=1`), or `0`. */
function stuckLine(counts: Record<string, number>): string {
  const stuck = Object.entries(counts).filter(([, n]) => n > 0);
  return stuck.length === 0 ? '0' : stuck.map(([status, n]) => `${status}=${n}`).join(', ');
}

/** Per destination (configured, or paused/tripped before): backlog, dead letters, oldest waiting, pause. */
function forwardingStats(config: Config, db: Db) {
  const repo = forwardDeliveries(db);
  const names = new Set(config.forwarding.destinations.map((d) => d.name));
  for (const row of repo.destinations()) names.add(row.name);
  return repo.gauges([...names]).map((g) => ({
    destination: g.destination,
    pending: g.pending,
    dead: g.dead,
    oldest_pending_at: g.oldest_pending_at,
    paused:
      g.paused === 1 || config.forwarding.destinations.some((d) => d.name === g.destination && d.paused),
  }));
}
