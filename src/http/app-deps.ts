import type { ServiceClient } from '../client';
import type { Clock } from '../clock';
import type { Config } from '../config';
import type { AnswerTracker, OverloadSnapshot } from '../domain/answer-first';
import type { Destination } from '../domain/forwarding/destinations';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';
import type { StorePort } from '../core/store-port';
import type { SubjectService } from '../core/subject-report';
import type { StoreQuery } from '../domain/sql/store-sql';
import type { DeliveryWriter } from '../domain/delivery';
import type { FeedWaiters } from './admin/feed-waiters';
import type { DeliveryWatch } from './delivery-watch';
import type { InFlightAnswers, WebhookHandler } from './webhook-handler';
import type { Readiness } from '../domain/watermark';

/**
 * What the Express app is built from (createApp in app.ts). Its own file, so that the routers,
 * which take it, and app.ts, which mounts them, do not import each other.
 */
import type { Traces } from '../domain/tracing';

export interface AppDeps {
  config: Pick<Config, 'webhookSecrets' | 'signatureHeader' | 'maxBodyBytes' | 'adminToken'> &
    Partial<Pick<Config, 'allowedCidrs' | 'trustProxy' | 'stuckAfter'>> &
    /**
     * The console (contract §9): VIEWER_TOKEN, CONSOLE_SESSION_TTL, and the silence alarm's
     * threshold it shows. @default no viewer token, 8 h, silence alarm off
     */
    Partial<
      Pick<Config, 'viewerToken' | 'consoleSessionTtlMs' | 'deliverySilenceAlarmMs' | 'retentionDays'>
    > &
    /** The console's sign-in through the identity provider (OIDC_*). @default null (tokens only) */
    Partial<Pick<Config, 'oidc'>>;
  /** The local SQLite file (the store in SQLite mode, the spool in cluster mode): /readyz probes it. */
  store: LocalFile;
  /**
   * The store the admin API, the console and /metrics read and write (core/store-port.ts): the
   * SQLite file, or PostgreSQL in cluster mode (the ClusterNode's, rejecting with a StorageError
   * while PostgreSQL is away: `/admin/*` answers 503, the console a 503 page). The routes ask it
   * what differs between stores (`mayBeAway`, `gauges`), never another dependency.
   */
  storePort: StorePort<StoreQuery>;
  writer: DeliveryWriter;
  metrics: Metrics;
  logger: Logger;
  clock: Clock;
  /**
   * Tracing (OTEL_TRACES_EXPORTER=otlp): a SERVER span per webhook request.
   * @default undefined (off)
   */
  traces?: Traces | undefined;
  /**
   * The in-process pipeline: a replay is picked up at once instead of at the next sweep.
   * @default undefined (replays wait for the sweep)
   */
  pipeline?: { sweep(): void } | undefined;
  /**
   * The service's API, for `POST /admin/averbacoes` (start one and track it).
   * @default undefined (that route answers 503 service_not_configured)
   */
  serviceClient?: Pick<ServiceClient, 'startAverbacao'> | null | undefined;
  /**
   * REGISTRY_WEBHOOK_GRACE_MS: a declared registration's first poll waits this long.
   * @default 0
   */
  registryGraceMs?: number | undefined;
  /**
   * Whether this process holds the processing lease; `/readyz` reports it (a standby is ready: it
   * ingests, and only its processing waits).
   * @default undefined (not reported)
   */
  isProcessing?: (() => boolean) | undefined;
  /**
   * Cluster mode: `/readyz` waits for this replica's first relay heartbeat (health-routes.ts);
   * `refused`: the replica refuses PostgreSQL's schema (issue 46), and `/readyz` and the webhook
   * routes answer 503 with why.
   */
  readiness?: (() => Readiness) | undefined;
  /**
   * Cluster mode (DATABASE_URL): this replica's relay, which the console's overview shows (the
   * spool's backlog and lag).
   * @default undefined (SQLite mode)
   */
  relay?: ConsoleRelay | undefined;
  /**
   * One person's data (issue 45, LGPD): find, export and erase them everywhere this process reaches
   * (src/subject-places.ts `subjectsOnServer`: the log, this replica's spool, the backups and the
   * erasure journal of a SQLite log), for `/admin/subjects/*` and `/console/subjects`.
   * @default undefined (those answer 503 `subjects_unavailable`)
   */
  subjects?: SubjectService | undefined;
  /**
   * The webhook handler to mount, so that the fast path and Express share one (and one run of the
   * deactivation alarm).
   * @default a new handler built from `config`
   */
  webhook?: WebhookHandler | undefined;
  /**
   * The deactivation alarm the webhook handler reports every answer to (startDeliveryWatch: the
   * run is stored and the silence checked).
   * @default a watch in memory only
   */
  deliveryWatch?: DeliveryWatch | undefined;
  /**
   * Cluster mode: the webhook requests being answered, which the relay's heartbeat may not cover yet.
   * @default undefined (not tracked)
   */
  inFlight?: InFlightAnswers | undefined;
  /**
   * Answers first (issue 23): the webhook handler reports each answer's start and end, and the
   * console's overview shows whether background work is deferred.
   * @default undefined (nothing waits for the answers)
   */
  answers?: (AnswerTracker & { snapshot(): OverloadSnapshot }) | undefined;
  /**
   * Forwarding (contract §8), for `/admin/forwards*`, `/admin/destinations*` and `/admin/feed`: the
   * configured destinations, whether the feed shows the CPF in full, the long-polls waiting for a
   * commit (`waiters.notify()` after each, `waiters.close()` at shutdown), and `nudge()` to make the
   * sender look at once after a replay, a backfill or a resume.
   * @default undefined (those routes read the database alone: no destination configured, CPF
   * masked, the feed served, long-polls see new messages within 500 ms, the sender finds replays
   * at its next look)
   */
  forwarding?:
    | {
        destinations: readonly Destination[];
        feedFullCpf: boolean;
        /** FEED_ENABLED: otherwise `/admin/feed` answers 404 `feed_disabled`. */
        feedEnabled: boolean;
        waiters: FeedWaiters;
        nudge(): void;
      }
    | undefined;
}

/** The local file as the HTTP server sees it (sqlite/store.ts `Store` is one). */
export interface LocalFile {
  readonly path: string;
  /** Proves the file is open, migrated and takes a write; throws StorageError otherwise. */
  probeWrite(now: Date): void;
}

/** This replica's relay as the overview shows it (sqlite/spool.ts `Spool` has both). */
export interface ConsoleRelay {
  /** The spool's identity: its row in PostgreSQL's `relay_spools`. */
  readonly id: string;
  /** Deliveries acknowledged here and not yet in PostgreSQL, and the oldest one's received_at. */
  backlog(): { count: number; oldestReceivedAt: string | null };
}
