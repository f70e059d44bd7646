import type { Clock } from '../../clock';
import type { Destination } from '../../domain/forwarding/destinations';
import { DEFAULT_STUCK_AFTER, type StuckLimits } from '../../domain/stuck';
import type { Logger } from '../../logger';
import { auditRepo } from '../../store/audit';
import { consoleAverbacoes } from '../../store/console-averbacoes';
import { consoleEvents } from '../../store/console-events';
import { consoleProposals } from '../../store/console-proposals';
import { deliveryRollup } from '../../store/console-rollup';
import { consoleSessionsRepo } from '../../store/console-sessions';
import type { Db } from '../../store/database';
import { deliveryAlarmRepo } from '../../store/delivery-alarm';
import { forwardAdmin } from '../../store/forward-admin';
import { proposalLists } from '../../store/proposal-lists';
import type { Store } from '../../store/store';
import type { AppDeps } from '../app';

/** Every statement the console runs, prepared once when the console is mounted. */
export function consoleQueries(db: Db) {
  return {
    events: consoleEvents(db),
    proposals: consoleProposals(db),
    averbacoes: consoleAverbacoes(db),
    rollup: deliveryRollup(db),
    lists: proposalLists(db),
    forwards: forwardAdmin(db),
    alarm: deliveryAlarmRepo(db),
    audit: auditRepo(db),
    sessions: consoleSessionsRepo(db),
  };
}

export type ConsoleQueries = ReturnType<typeof consoleQueries>;

/** What the console's pages and actions need, read once from the app's dependencies. */
export interface ConsoleDeps {
  store: Store;
  clock: Clock;
  logger: Logger;
  q: ConsoleQueries;
  tokens: { admin: string | undefined; viewer: string | undefined };
  /** CONSOLE_SESSION_TTL in ms. */
  sessionTtlMs: number;
  /** TRUST_PROXY: proxies whose X-Forwarded-For / X-Forwarded-Proto are believed. */
  trustProxy: number;
  /** DELIVERY_SILENCE_ALARM_MS (0: off). */
  silenceMs: number;
  /** STUCK_AFTER. */
  stuckAfter: StuckLimits;
  destinations: readonly Destination[];
  /** Picks a replayed event up at once. */
  sweep: () => void;
  /** Makes the forwarding sender look at once (after a replay or a resume). */
  nudge: () => void;
}

/** Whether the console exists at all: a token signs in (otherwise every /console path is a 404). */
export function consoleEnabled(deps: Pick<AppDeps, 'config'>): boolean {
  return deps.config.adminToken !== undefined || deps.config.viewerToken !== undefined;
}

export function consoleDeps(deps: AppDeps): ConsoleDeps {
  const { config } = deps;
  return {
    store: deps.store,
    clock: deps.clock,
    logger: deps.logger,
    q: consoleQueries(deps.store.db),
    tokens: { admin: config.adminToken, viewer: config.viewerToken },
    sessionTtlMs: config.consoleSessionTtlMs ?? 8 * 3_600_000,
    trustProxy: config.trustProxy ?? 0,
    silenceMs: config.deliverySilenceAlarmMs ?? 0,
    stuckAfter: config.stuckAfter ?? DEFAULT_STUCK_AFTER,
    destinations: deps.forwarding?.destinations ?? [],
    sweep: () => deps.pipeline?.sweep(),
    nudge: () => deps.forwarding?.nudge(),
  };
}
