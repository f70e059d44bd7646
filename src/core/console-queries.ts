import type { OverviewFigures, OverviewQuery, ProposalListing } from '../domain/console';
import type { DestinationSummary } from '../domain/forwarding/admin';
import type { Destination } from '../domain/forwarding/destinations';
import type { StoreQuery, StoreSql } from '../domain/sql/store-sql';
import { overviewFigures, type AlarmFigures, updateRollup } from './console-overview';
import {
  countEvents,
  eventForwards,
  eventIds,
  eventWithBody,
  listAverbacoes,
  listDeliveries,
  listEvents,
  proposalCounts,
  proposalExists,
  proposalStory,
} from './console-reads';
import { consoleAudit, consoleSessions, signInFailures } from './console-session-queries';
import { proposalPage } from './proposal-lists';

/**
 * The operator console's store (core/store-port.ts `ConsoleStore`), written once for both
 * stores (issue 24) against the log's one SQL path ({@link StoreSql}, domain/sql/store-sql.ts): its
 * pages' reads and its actions' writes, in the SQLite log's shapes, so that one set of pages
 * renders either. What the console shows but does not own comes in as {@link ConsoleStoreParts}.
 * Each page's reads run in one snapshot where they are more than one (the overview, a proposal's
 * story), so the figures of a page agree with each other.
 */

/** What the console shows but each store keeps its own way. */
export interface ConsoleStoreParts<Q extends StoreQuery> {
  /** The overview's figures the stores keep (see {@link AlarmFigures}). */
  figures(q: Q, query: OverviewQuery): Promise<AlarmFigures>;
  /** The forwarding destinations' summaries (the admin API's). */
  destinationSummaries(configured: readonly Destination[]): Promise<DestinationSummary[]>;
}

export function consoleQueries<Q extends StoreQuery>(sql: StoreSql<Q>, parts: ConsoleStoreParts<Q>) {
  return {
    sessions: consoleSessions(sql),
    audit: consoleAudit(sql),
    signInFailures: signInFailures(sql),
    /**
     * The overview's figures: the deliveries that arrived since the last view counted into the
     * hourly rollup first (its own transaction), then the figures in one snapshot.
     */
    overview: async (now: Date, query: OverviewQuery): Promise<OverviewFigures> => {
      const rollup = await updateRollup(sql, now);
      const figures = await sql.read((q) => overviewFigures(q, now, query, () => parts.figures(q, query)));
      return { rollup, ...figures, destinations: await parts.destinationSummaries(query.destinations) };
    },
    /** A page of events (the window rule of core/console-reads.ts). */
    events: (f: Parameters<typeof listEvents>[1]) => sql.read((q) => listEvents(q, f)),
    /** Every event the filter matches (no paging, no window): a bulk replay's count. */
    countEvents: (f: Parameters<typeof countEvents>[1]) => sql.read((q) => countEvents(q, f)),
    /** Up to `limit` matching ids below `before`, newest first (a bulk replay walks them in chunks). */
    eventIds: (f: Parameters<typeof eventIds>[1], before: number, limit: number) =>
      sql.read((q) => eventIds(q, f, before, limit)),
    /** One event, its raw body (text when valid UTF-8, else the bytes) and the messages it caused. */
    event: (id: number) =>
      sql.read(async (q) => {
        const found = await eventWithBody(q, id);
        return found && { ...found, forwards: await eventForwards(q, id) };
      }),
    deliveries: (f: Parameters<typeof listDeliveries>[1]) => sql.read((q) => listDeliveries(q, f)),
    /** Proposals per status (the funnel) and one page of a listing. */
    proposals: (listing: ProposalListing) =>
      sql.read(async (q) => ({
        counts: await proposalCounts(q),
        rows: await proposalPage(q, listing),
      })),
    /** Whether a proposal row or an event names `nu`. */
    proposalExists: (nu: number | string) => sql.read((q) => proposalExists(q, nu)),
    /** What the proposal page tells; undefined when nothing names this proposal. */
    proposalStory: (nu: number | string) => sql.read((q) => proposalStory(q, nu)),
    /** A page of averbações, newest tracked first; `next` is the `before` of the next page. */
    averbacoes: (f: Parameters<typeof listAverbacoes>[1]) => sql.read((q) => listAverbacoes(q, f)),
  };
}
