import { FEED_DISABLED } from '../http/admin/feed-routes';
import type { FeedReader } from '../core/store-port';
import type { Command } from 'commander';
import type { Config } from '../config';
import { ConsigError, UsageError } from '../domain/errors';
import type { Destination, MessageType } from '../domain/forwarding/destinations';
import { bodyFor } from '../domain/forwarding/messages';
import {
  type BackfillCounts,
  DELIVERY_STATUS_FILTERS,
  type DeliveryStatusFilter,
  type DestinationSummary,
  FEED_DEFAULT_TYPES,
  type ForwardFilter,
  type ForwardRow,
  isEmptyFilter,
  isMessageType,
  parseInstant,
  type ReplayCounts,
  shownForward,
  shownForwardRow,
} from '../domain/forwarding/admin';
import { decodeFeedCursor, encodeFeedCursor } from '../core/feed-reader';
import { parseNuProposta } from '../domain/log-rows';
import { type CommandSession, withCommandStore } from '../open-store';
import type { Output } from './log-commands';
import { renderTable } from './table';

/**
 * `forwards …` (list, show, replay, pause, resume, backfill, destinations) and `feed` (contract §8):
 * the operators' tools over the forwarding tables, through the log's port (src/open-store.ts: the
 * SQLite file, or in cluster mode, DATABASE_URL, contract §10, the PostgreSQL database the replicas
 * share), with the same options and the same output in both. They read the destinations from the
 * same environment and DESTINATIONS_FILE as `serve`. A running receiver sees their writes at its
 * sender's next look (within about a second); in cluster mode a replay, resume or backfill notifies
 * the sending replica, which looks at once.
 */

/** Where `feed` writes: messages on `out` (stdout), its cursor on `err` (stderr). */
export interface FeedOutput extends Output {
  err: (text: string) => void;
}

/** How often `feed --follow` looks at the database. */
export const FEED_FOLLOW_INTERVAL_MS = 500;

/** Registers `forwards` and its subcommands, and `feed`, on the program. */
export function registerForwardCommands(program: Command, config: () => Config, io: FeedOutput): void {
  const forwards = program
    .command('forwards')
    .description('messages forwarded to destinations: list, show attempts, replay, pause/resume, backfill');
  registerReadCommands(forwards, config, io);
  registerWriteCommands(forwards, config, io);
  program
    .command('feed')
    .description(
      'the change feed as JSON lines on stdout (one message per line, in commit order, CPF masked unless ' +
        'FEED_FULL_CPF=true). Without --follow: one batch of at most --limit messages. The cursor to resume ' +
        'from (--after) goes to stderr as "cursor <cursor>": with --follow after each batch that moved it, ' +
        'and always once at the end',
    )
    .option('--after <cursor>', 'resume after this cursor (default: from the first message)')
    .option('--limit <n>', 'messages per batch, 1 to 1000 (default 100)')
    .option('--types <list>', 'comma-separated message types (default proposal.changed,averbacao.result)')
    .option('--follow', `keep polling the database every ${FEED_FOLLOW_INTERVAL_MS} ms until SIGINT/SIGTERM`)
    .action((opts: FeedOptions) => feedCommand(config(), opts, io));
}

function registerReadCommands(forwards: Command, config: () => Config, io: Output): void {
  forwards
    .command('list')
    .description('deliveries of messages to destinations, newest first')
    .option('--destination <name>', 'only this destination')
    .option('--status <status>', `${DELIVERY_STATUS_FILTERS.join(' | ')} (retrying: pending after a failure)`)
    .option('--proposal <nu_proposta>', 'only this proposal')
    .option('--type <type>', 'event.received | proposal.changed | averbacao.result')
    .option('--since <time>', 'messages created at or after (ISO 8601 date, or date-time with zone)')
    .option('--until <time>', 'messages created before')
    .option('--limit <n>', 'rows, 1 to 1000 (default 50)')
    .option('--json', 'JSON for scripts')
    .action((opts: ListOptions) => forwardsListCommand(config(), opts, io));

  forwards
    .command('show')
    .description('one delivery: its message (CPF masked) and every attempt')
    .argument('<id>', 'delivery id (see forwards list)')
    .option('--json', 'JSON for scripts')
    .action((id: string, opts: { json?: boolean }) => forwardsShowCommand(config(), id, opts, io));

  forwards
    .command('destinations')
    .description('configured destinations (never their secrets): paused, counts by status, circuit')
    .option('--json', 'JSON for scripts')
    .action((opts: { json?: boolean }) => forwardsDestinationsCommand(config(), opts, io));
}

function registerWriteCommands(forwards: Command, config: () => Config, io: Output): void {
  forwards
    .command('replay')
    .description(
      'send deliveries again: dead or delivered ones start over, pending ones are due now. By ids, or by ' +
        'filter (without --yes it only says how many and exits 1)',
    )
    .argument('[ids...]', 'delivery ids')
    .option('--destination <name>', 'only this destination')
    .option('--status <status>', DELIVERY_STATUS_FILTERS.join(' | '))
    .option('--proposal <nu_proposta>', 'only this proposal')
    .option('--since <time>', 'messages created at or after')
    .option('--until <time>', 'messages created before')
    .option('--yes', 'replay what the filter matches')
    .option('--json', 'JSON for scripts')
    .action((ids: string[], opts: ReplayOptions) => forwardsReplayCommand(config(), ids, opts, io));

  for (const [name, paused] of [
    ['pause', true],
    ['resume', false],
  ] as const) {
    forwards
      .command(name)
      .description(
        paused
          ? 'stop sending to a destination; its messages accumulate until it is resumed'
          : 'send to a paused destination again (not one paused in its configuration file)',
      )
      .argument('<name>', 'destination name')
      .action((destination: string) => forwardsPauseCommand(config(), destination, paused, io));
  }

  forwards
    .command('backfill')
    .description(
      'give a destination the stored messages it wants and never had (a proposal, a time range, or all)',
    )
    .requiredOption('--destination <name>', 'a configured destination')
    .option('--proposal <nu_proposta>', 'only this proposal')
    .option('--since <time>', 'messages created at or after')
    .option('--until <time>', 'messages created before')
    .option('--json', 'JSON for scripts')
    .action((opts: BackfillOptions) => forwardsBackfillCommand(config(), opts, io));
}

/** Reads in one snapshot; writes on a connection of the command's own, each chunk its own transaction. */
const READ: CommandSession = { access: 'read' };
const WRITE: CommandSession = { access: 'write', command: 'forwards command' };

// ---- read ----------------------------------------------------------------------------------------

interface FilterOptions {
  destination?: string;
  status?: string;
  proposal?: string;
  since?: string;
  until?: string;
}

export interface ListOptions extends FilterOptions {
  type?: string;
  limit?: string;
  json?: boolean;
}

/** `forwards list`. */
export async function forwardsListCommand(config: Config, opts: ListOptions, io: Output): Promise<void> {
  const limit = integerOption(opts.limit, '--limit', 1, 1000) ?? 50;
  if (opts.type !== undefined && !isMessageType(opts.type)) {
    throw new UsageError(
      `--type expects event.received, proposal.changed or averbacao.result, got "${opts.type}"`,
    );
  }
  const filter = { ...filterOf(opts), type: opts.type as MessageType | undefined, limit };
  const rows = await withCommandStore(config, READ, (log) => log.forwards.list(filter));
  showForwardList(rows.map(shownForwardRow), opts, io);
}

function showForwardList(rows: readonly ForwardRow[], opts: { json?: boolean }, io: Output): void {
  if (opts.json) return io.out(JSON.stringify(rows, null, 2));
  const columns = ['id', 'destination', 'status', 'attempts', 'type', 'nu_proposta', 'evento'];
  const more = ['message_created_at', 'next_attempt_at', 'last_status', 'last_error'];
  io.out(renderTable([...columns, ...more], rows as unknown as Record<string, unknown>[]));
}

/** `forwards show <id>`: the message and every attempt, CPF masked (whatever the destination gets). */
export async function forwardsShowCommand(
  config: Config,
  id: string,
  opts: { json?: boolean },
  io: Output,
): Promise<void> {
  const deliveryId = idOf(id);
  const detail = await withCommandStore(config, READ, async (log) => {
    const found = await log.forwards.show(deliveryId);
    if (found === undefined) throw new UsageError(`no forward ${id} in ${log.name}`);
    return found;
  });
  // CPF masked even for a destination that gets it in full (contract §5).
  const shown = shownForward(detail);
  if (opts.json) return io.out(JSON.stringify(shown, null, 2));
  const d = shown.delivery;
  io.out(
    `forward ${d.id}: ${d.type} ${d.webhook_id} → ${d.destination}: ${d.status}, ${d.attempts} attempt(s)` +
      (d.next_attempt_at === null ? '' : `, next at ${d.next_attempt_at}`) +
      (d.last_error === null ? '' : `, last error: ${d.last_error}`),
  );
  io.out(JSON.stringify(shown.message, null, 2));
  io.out(
    renderTable(
      ['attempt', 'started_at', 'duration_ms', 'http_status', 'outcome', 'error', 'answer'],
      shown.attempts as unknown as Record<string, unknown>[],
    ),
  );
}

/** `forwards destinations`. */
export async function forwardsDestinationsCommand(
  config: Config,
  opts: { json?: boolean },
  io: Output,
): Promise<void> {
  const configured = config.forwarding.destinations;
  const summaries = await withCommandStore(config, READ, (log) =>
    log.forwards.destinationSummaries(configured),
  );
  showDestinations(summaries, opts, io);
}

function showDestinations(
  summaries: readonly DestinationSummary[],
  opts: { json?: boolean },
  io: Output,
): void {
  if (opts.json) return io.out(JSON.stringify(summaries, null, 2));
  const rows = summaries.map((s) => ({
    ...s,
    ...s.counts,
    paused: s.paused ? (s.paused_in_config ? 'yes (config)' : 'yes') : 'no',
    configured: s.configured ? 'yes' : 'no',
    circuit: s.circuit.state,
  }));
  const columns = ['name', 'configured', 'paused', 'pending', 'retrying', 'delivered', 'dead'];
  io.out(renderTable([...columns, 'oldest_pending_at', 'circuit', 'url'], rows));
}

// ---- write ---------------------------------------------------------------------------------------

export interface ReplayOptions extends FilterOptions {
  yes?: boolean;
  json?: boolean;
}

export interface BackfillOptions {
  destination: string;
  proposal?: string;
  since?: string;
  until?: string;
  json?: boolean;
}

const PICKED_UP = 'a running receiver sends them within about a second';

/** `forwards replay <id>…` or `forwards replay --destination X --status dead … --yes`. */
export async function forwardsReplayCommand(
  config: Config,
  ids: string[],
  opts: ReplayOptions,
  io: Output,
): Promise<void> {
  const filter = filterOf(opts);
  if (ids.length > 0 && !isEmptyFilter(filter)) {
    throw new UsageError('forwards replay takes delivery ids or a filter, not both');
  }
  if (ids.length === 0 && isEmptyFilter(filter)) {
    throw new UsageError(
      'forwards replay needs delivery ids or a filter (--destination, --status, --proposal, --since, --until)',
    );
  }
  const parsed = ids.map(idOf);
  const counts = await withCommandStore(config, WRITE, async ({ forwards, name }) => {
    if (parsed.length > 0) {
      // Ids that name no delivery stop a replay by ids before anything is written.
      const missing = await forwards.missing(parsed);
      if (missing.length > 0) throw new UsageError(`no forward ${missing.join(', ')} in ${name}`);
      return forwards.replay(parsed, new Date().toISOString());
    }
    confirmReplay(await forwards.countWhere(filter), opts);
    return forwards.replayWhere(filter, new Date().toISOString());
  });
  showReplayed(counts, opts, io);
}

/** A replay by filter that would touch something needs --yes. */
function confirmReplay(matched: ReplayCounts, opts: ReplayOptions): void {
  if (matched.replayed > 0 && !opts.yes) {
    throw new ConsigError(
      'CONFIRMATION_REQUIRED',
      `${describeCounts(matched)} would be replayed; run again with --yes to replay them`,
    );
  }
}

function showReplayed(counts: ReplayCounts, opts: { json?: boolean }, io: Output): void {
  if (opts.json) return io.out(JSON.stringify(counts));
  io.out(counts.replayed === 0 ? 'nothing to replay' : `replayed ${describeCounts(counts)} (${PICKED_UP})`);
}

function describeCounts(counts: ReplayCounts): string {
  const { dead, delivered, pending } = counts.by_status;
  return `${counts.replayed} deliver${counts.replayed === 1 ? 'y' : 'ies'} (dead ${dead}, delivered ${delivered}, pending ${pending})`;
}

/** `forwards pause <name>` / `forwards resume <name>`. */
export async function forwardsPauseCommand(
  config: Config,
  name: string,
  paused: boolean,
  io: Output,
): Promise<void> {
  const destination = configuredOrFail(config, name);
  if (!paused && destination.paused) {
    throw new UsageError(
      `destination ${name} is paused in its configuration file ("paused": true): change the file and restart`,
    );
  }
  const now = new Date().toISOString();
  await withCommandStore(config, WRITE, (log) => log.forwards.setPaused(name, paused, now));
  io.out(
    paused
      ? `destination ${name} paused: its messages accumulate until \`forwards resume ${name}\``
      : `destination ${name} resumed (${PICKED_UP})`,
  );
}

/** `forwards backfill --destination X [--proposal N] [--since] [--until]`. */
export async function forwardsBackfillCommand(
  config: Config,
  opts: BackfillOptions,
  io: Output,
): Promise<void> {
  const destination = configuredOrFail(config, opts.destination);
  const { nuProposta, since, until } = filterOf(opts);
  const range = { nuProposta, since, until };
  const now = new Date().toISOString();
  const counts = await withCommandStore(config, WRITE, (log) =>
    log.forwards.backfill(destination, range, now),
  );
  showBackfilled(destination, counts, opts, io);
}

function showBackfilled(
  destination: Destination,
  counts: BackfillCounts,
  opts: { json?: boolean },
  io: Output,
): void {
  if (opts.json) return io.out(JSON.stringify({ destination: destination.name, ...counts }));
  io.out(
    `${destination.name}: ${counts.matched} stored message(s) wanted, ${counts.created} new deliver${counts.created === 1 ? 'y' : 'ies'} queued` +
      (counts.created > 0 ? ` (${PICKED_UP})` : ''),
  );
}

// ---- feed ----------------------------------------------------------------------------------------

export interface FeedOptions {
  after?: string;
  limit?: string;
  types?: string;
  follow?: boolean;
}

/**
 * `feed`: prints one message per line (CPF masked unless FEED_FULL_CPF), then `cursor <cursor>` on
 * stderr; with `--follow`, polls every {@link FEED_FOLLOW_INTERVAL_MS} until SIGINT or SIGTERM (or
 * stdout is closed), then exits 0. In cluster mode it also LISTENs on the outbox's channel, so a
 * message committed by any replica is printed at once.
 */
export async function feedCommand(config: Config, opts: FeedOptions, io: FeedOutput): Promise<void> {
  if (!config.forwarding.feedEnabled) throw new UsageError(FEED_DISABLED);
  const afterId = opts.after === undefined ? 0 : decodeFeedCursor(opts.after);
  if (afterId === null) throw new UsageError('--after expects a cursor printed by feed or GET /admin/feed');
  const limit = integerOption(opts.limit, '--limit', 1, 1000) ?? 100;
  const types = typesOf(opts.types);
  const stop = stopSignal();
  try {
    await withCommandStore(config, { access: 'follow', command: 'feed' }, async (log) => {
      // Before the first read: nothing committed after it can go unnoticed.
      if (opts.follow) await log.listen(() => stop.nudge());
      await feedLoop(config, opts, io, stop, { afterId, limit, types }, log.feed);
    });
  } finally {
    stop.dispose();
  }
}

/** Prints pages from `start` on; with --follow, waits for more until stopped. */
async function feedLoop(
  config: Config,
  opts: FeedOptions,
  io: FeedOutput,
  stop: ReturnType<typeof stopSignal>,
  start: { afterId: number; limit: number; types: readonly MessageType[] },
  read: FeedReader,
): Promise<void> {
  const { limit, types } = start;
  let afterId = start.afterId;
  for (;;) {
    const page = await read(afterId, limit, types);
    for (const m of page.messages) io.out(bodyFor(m.body, config.forwarding.feedFullCpf));
    const moved = page.lastId !== afterId;
    afterId = page.lastId;
    if (!opts.follow) break;
    if (moved) io.err(`cursor ${encodeFeedCursor(afterId)}`);
    if (page.messages.length < limit) await stop.sleep(FEED_FOLLOW_INTERVAL_MS);
    if (stop.stopped) break;
  }
  if (!opts.follow || stop.stopped) io.err(`cursor ${encodeFeedCursor(afterId)}`);
}

/**
 * SIGINT, SIGTERM or a closed stdout (`feed --follow | head`) end the follow loop cleanly; `nudge`
 * (a notification) ends the current sleep early, to read again at once.
 */
function stopSignal() {
  let stopped = false;
  // A nudge that comes while the loop is reading is kept, so the next sleep ends at once.
  let nudged = false;
  let wake: (() => void) | null = null;
  const onStop = () => {
    stopped = true;
    wake?.();
  };
  process.once('SIGINT', onStop);
  process.once('SIGTERM', onStop);
  process.stdout.once('error', onStop);
  return {
    get stopped() {
      return stopped;
    },
    nudge() {
      if (wake) wake();
      else nudged = true;
    },
    sleep: (ms: number) =>
      new Promise<void>((resolve) => {
        if (stopped || nudged) {
          nudged = false;
          return resolve();
        }
        const timer = setTimeout(() => wake?.(), ms);
        wake = () => {
          clearTimeout(timer);
          wake = null;
          resolve();
        };
      }),
    dispose() {
      process.removeListener('SIGINT', onStop);
      process.removeListener('SIGTERM', onStop);
      process.stdout.removeListener('error', onStop);
    },
  };
}

// ---- options -------------------------------------------------------------------------------------

function filterOf(opts: FilterOptions): ForwardFilter {
  if (opts.status !== undefined && !(DELIVERY_STATUS_FILTERS as readonly string[]).includes(opts.status)) {
    throw new UsageError(`--status expects ${DELIVERY_STATUS_FILTERS.join(', ')}, got "${opts.status}"`);
  }
  if (opts.destination === '') throw new UsageError('--destination expects a destination name');
  return {
    destination: opts.destination,
    status: opts.status as DeliveryStatusFilter | undefined,
    nuProposta:
      opts.proposal === undefined || opts.proposal === '' ? undefined : parseNuProposta(opts.proposal),
    since: instantOption(opts.since, '--since'),
    until: instantOption(opts.until, '--until'),
  };
}

function instantOption(value: string | undefined, flag: string): string | undefined {
  if (value === undefined) return undefined;
  const parsed = parseInstant(value);
  if (parsed === null) {
    throw new UsageError(
      `${flag} expects an ISO 8601 date (2026-11-21) or date-time with its zone (2026-11-21T10:00:00-03:00), got "${value}"`,
    );
  }
  return parsed;
}

function integerOption(
  value: string | undefined,
  flag: string,
  min: number,
  max: number,
): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < min || n > max) {
    throw new UsageError(`${flag} expects an integer from ${min} to ${max}, got "${value}"`);
  }
  return n;
}

function idOf(text: string): number {
  if (!/^[1-9]\d{0,14}$/.test(text))
    throw new UsageError(`delivery ids are positive integers, got "${text}"`);
  return Number(text);
}

function typesOf(value: string | undefined): readonly MessageType[] {
  if (value === undefined) return FEED_DEFAULT_TYPES;
  const names = value.split(',').map((t) => t.trim());
  const bad = names.find((t) => !isMessageType(t));
  if (bad !== undefined) {
    throw new UsageError(
      `--types expects a comma-separated list of event.received, proposal.changed, averbacao.result, got "${bad}"`,
    );
  }
  return [...new Set(names as MessageType[])];
}

function configuredNamed(config: Config, name: string): Destination | undefined {
  return config.forwarding.destinations.find((d) => d.name === name);
}

function configuredOrFail(config: Config, name: string): Destination {
  const destination = configuredNamed(config, name);
  if (destination === undefined) {
    const names = config.forwarding.destinations.map((d) => d.name).join(', ') || 'none';
    throw new UsageError(
      `no destination "${name}" is configured (configured: ${names}; see FORWARD_URL, DESTINATIONS_FILE)`,
    );
  }
  return destination;
}
