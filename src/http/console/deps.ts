import type { Clock } from '../../clock';
import { consoleFingerprints, consoleTokens, type TokenFingerprints } from '../../domain/console';
import type { OverloadSnapshot } from '../../domain/answer-first';
import type { Destination } from '../../domain/forwarding/destinations';
import { DEFAULT_STUCK_AFTER, type StuckLimits } from '../../domain/stuck';
import type { Logger } from '../../logger';
import type { AppDeps, ConsoleRelay } from '../app-deps';
import { type ConsoleStore, consoleStore } from '../../core/store-port';
import type { SubjectService } from '../../core/subject-report';
import { OidcClient } from './oidc-client';

/** What the console's pages and actions need, read once from the app's dependencies. */
export interface ConsoleDeps {
  clock: Clock;
  logger: Logger;
  /** The log the pages read and the actions write: the SQLite file, or PostgreSQL in cluster mode. */
  log: ConsoleStore;
  /**
   * Whether `log` may be away while the console runs (PostgreSQL, shared by the replicas; the
   * store port's `mayBeAway`): a StorageError is then a 503 page asking to come back.
   */
  mayBeAway: boolean;
  /**
   * Cluster mode: this replica's relay, whose figures the overview shows (its spool's backlog and
   * lag); undefined in SQLite mode.
   */
  relay: ConsoleRelay | undefined;
  /**
   * The tokens that sign in to the console: ADMIN_TOKEN and VIEWER_TOKEN, or neither while the
   * identity provider is configured without CONSOLE_BREAK_GLASS (`/admin/*` keeps its token).
   */
  tokens: { admin: string | undefined; viewer: string | undefined };
  /** The identity provider's client (OIDC_*); null: the tokens sign in. */
  oidc: OidcClient | null;
  /** The fingerprint of each configured token (and the provider's): a session opened by another one is over. */
  fingerprints: TokenFingerprints;
  /** CONSOLE_SESSION_TTL in ms. */
  sessionTtlMs: number;
  /** TRUST_PROXY: proxies whose X-Forwarded-For / X-Forwarded-Proto are believed. */
  trustProxy: number;
  /** PUBLIC_URL is https (with the identity provider): the cookies are Secure and `__Host-` always. */
  httpsPublicUrl: boolean;
  /** DELIVERY_SILENCE_ALARM_MS (0: off). */
  silenceMs: number;
  /** STUCK_AFTER. */
  stuckAfter: StuckLimits;
  destinations: readonly Destination[];
  /**
   * Whether registry polls run: the poller (cluster mode: this replica's registry-poll workers)
   * exists exactly when the service's API is configured (SERVICE_BASE_URL), and then `serviceClient`
   * is set (main.ts). Off, the pages say so instead of "being polled" and a "next poll" that never comes.
   */
  registryPolling: boolean;
  /** RETENTION_DAYS; null: unset, personal data kept for good (the overview says so, issue 45). */
  retentionDays: number | null;
  /** Answers first (issue 23): whether background work waits for the answers; undefined: not known. */
  overload: (() => OverloadSnapshot) | undefined;
  /** One person's data, found and erased everywhere this server reaches (AppDeps.subjects). */
  subjects: SubjectService | undefined;
}

/**
 * Whether the console exists at all: a token or the identity provider signs in (otherwise every
 * /console path is a 404).
 */
export function consoleEnabled(deps: Pick<AppDeps, 'config'>): boolean {
  const { config } = deps;
  return (
    config.adminToken !== undefined ||
    config.viewerToken !== undefined ||
    (config.oidc !== undefined && config.oidc !== null)
  );
}

export function consoleDeps(deps: AppDeps): ConsoleDeps {
  const { config } = deps;
  const signIn = {
    adminToken: config.adminToken,
    viewerToken: config.viewerToken,
    oidc: config.oidc ?? null,
  };
  const log = consoleStore(deps.storePort);
  return {
    clock: deps.clock,
    logger: deps.logger,
    log,
    mayBeAway: deps.storePort.mayBeAway,
    relay: deps.relay,
    overload:
      deps.answers === undefined
        ? undefined
        : () => (deps.answers as { snapshot(): OverloadSnapshot }).snapshot(),
    tokens: consoleTokens(signIn),
    oidc:
      signIn.oidc === null
        ? null
        : new OidcClient(
            signIn.oidc,
            deps.logger,
            () => deps.clock.now().getTime(),
            (name, candidate) => log.sessions.key(name, candidate, deps.clock.now().toISOString()),
          ),
    fingerprints: consoleFingerprints(signIn),
    sessionTtlMs: config.consoleSessionTtlMs ?? 8 * 3_600_000,
    trustProxy: config.trustProxy ?? 0,
    httpsPublicUrl: signIn.oidc?.publicUrl.startsWith('https:') === true,
    silenceMs: config.deliverySilenceAlarmMs ?? 0,
    stuckAfter: config.stuckAfter ?? DEFAULT_STUCK_AFTER,
    destinations: deps.forwarding?.destinations ?? [],
    registryPolling: deps.serviceClient !== undefined && deps.serviceClient !== null,
    retentionDays: config.retentionDays ?? null,
    subjects: deps.subjects,
  };
}
