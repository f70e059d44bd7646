import type { ClusterConfig, Config } from '../../config';
import type { PostgresTarget } from '../../store-factory';
import { adminStore, type StorePort } from '../../core/store-port';
import type { StoreQuery } from '../../domain/sql/store-sql';
import { consoleFingerprints } from '../../domain/console';
import type { DestinationGauges } from '../../domain/forwarding/sender-store';
import type { Logger } from '../../logger';
import type { Metrics } from '../../metrics';
import { sqliteStorePort } from '../../sqlite/sqlite-port';
import { openSpool, type Spool } from '../../sqlite/spool';
import { lockSpool, type SpoolLock } from '../../sqlite/spool-lock';
import type { Store } from '../../sqlite/store';
import type { StartOptions } from '../../start-options';
import {
  applyErasuresToSpool,
  scheduleSubjectIndex,
  SPOOL_ERASURES_EVERY_MS,
  subjectsOnServer,
} from '../../subject-places';
import {
  type LocalFile,
  type ModeParts,
  openMigrated,
  partnerRouter,
  type ReceiverMode,
  type Runtime,
  type SharedParts,
} from '../receiver-mode';
import { RETENTION_FAILED, scheduleRetention, spoolPass } from '../retention-schedule';
import { ForwardSenderThread } from '../sender-thread';
import { InFlightRequests } from './in-flight';
import { ClusterNode } from './node';
import { OrderClock, type OrderReading } from './order-clock';

/*
 * Cluster mode (runtime/receiver-mode.ts's interface, contract §10): this replica acknowledges from
 * its SQLite file (the spool) as SQLite mode does; the ClusterNode relays the spool to PostgreSQL
 * and runs processing there (node.ts).
 */

/**
 * Cluster mode (contract §10): this replica acknowledges from its SQLite file (the spool) as
 * always; the ClusterNode relays the spool to PostgreSQL and runs processing there.
 */
export function clusterMode(config: Config, target: PostgresTarget, options: StartOptions): ReceiverMode {
  return {
    partnerHandlers: () => partnerRouter(options),
    open: () => openCluster(config, target, options),
  };
}

function openCluster(config: Config, target: PostgresTarget, options: StartOptions): LocalFile {
  // One spool, one replica; a second one on the same file stops here (spool-lock.ts).
  const spoolLock = config.databasePath === ':memory:' ? null : lockSpool(config.databasePath);
  const store = openMigratedOrRelease(config, options.logger, spoolLock);
  const spool = openSpool(store.db);
  // As the last /metrics read them from PostgreSQL (the spool has no outbox).
  const forwarding: { gauges: DestinationGauges[] } = { gauges: [] };
  return {
    store,
    gauges: { forwardingGauges: () => forwarding.gauges, relayBacklog: () => spool.backlog() },
    compose: (shared) => composeCluster(config, target, options, { store, spool, forwarding, shared }),
    close: () => {
      store.close();
      spoolLock?.release();
    },
  };
}

function composeCluster(
  config: Config,
  target: PostgresTarget,
  options: StartOptions,
  deps: { store: Store; spool: Spool; forwarding: { gauges: DestinationGauges[] }; shared: SharedParts },
): ModeParts {
  const { cluster } = target;
  const { store, spool, forwarding, shared } = deps;
  const { metrics } = shared;
  // The overload line's backlog: what this replica's spool holds for the relay.
  shared.answers.backlogFrom(() => ({ spool: spool.backlog().count }));
  // Issue 36: what this replica acknowledges is ordered on PostgreSQL's clock as it estimates it.
  const orderClock = new OrderClock(shared.clock);
  const inFlight = new InFlightRequests(() => orderClock.stamp());
  const sender = clusterSender(config, target, options, shared);
  const node = buildCluster(config, cluster, options, { ...shared, spool, inFlight, orderClock, sender });
  // RETENTION_DAYS on this replica's spool: local, so from start whether PostgreSQL answers or not.
  let spoolRetention: { stop(): void } | null = null;
  const days = config.retentionDays;
  const erasures = spoolErasures(node, store, options.logger);
  let subjectIndex: { stop(): void } | null = null;
  return {
    runtime: clusterRuntime(node, sender ?? null),
    afterStore: () => node.nudge(),
    start: () => {
      node.start();
      erasures.start();
      subjectIndex ??= scheduleSubjectIndex(
        adminStore(node.storePort).subjects,
        options.logger,
        () => node.connected,
      );
      if (days !== undefined)
        spoolRetention ??= scheduleRetention(spoolPass(spool), {
          days,
          clock: shared.clock,
          logger: options.logger,
          fields: { replica: cluster.replicaId },
          failure: RETENTION_FAILED.spool,
        });
    },
    // The delivery alarm reads every replica's answers (the service counts failures at all of them).
    sharedAnswers: () => node.sharedAnswers(),
    http: {
      isProcessing: () => node.processing,
      readiness: () => node.readiness(),
      // The admin API, the console and /metrics on PostgreSQL; the console's overview shows this
      // replica's relay.
      storePort: scrapedPort(node, metrics, forwarding),
      // One person's data (issue 45): PostgreSQL's log, and this replica's spool.
      subjects: subjectsOnServer(node.storePort, sqliteStorePort(store)),
      relay: spool,
      inFlight,
    },
    // The log the admin API and the console change is PostgreSQL's: its forwarder hears the NOTIFY.
    nudgeSender: () => undefined,
    // The relay finishes its batch, the workers their turns (the rest is taken over).
    stop: (timeoutMs) => {
      spoolRetention?.stop();
      erasures.stop();
      subjectIndex?.stop();
      return node.stop(timeoutMs);
    },
  };
}

/**
 * The node's port as the HTTP server uses it: each `/metrics` scrape sets this replica's own gauges
 * first, then reads the log's from PostgreSQL, keeping the destinations' for the metrics' collect.
 */
function scrapedPort(
  node: ClusterNode,
  metrics: Metrics,
  forwarding: { gauges: DestinationGauges[] },
): StorePort<StoreQuery> {
  return {
    ...node.storePort,
    gauges: (cutoffs) => {
      // A replica processes once connected with its turn workers: an ingest-only one
      // (CLUSTER_CONCURRENCY=0) reports 0, so ConsigNoProcessingHolder sees a cluster without workers.
      metrics.clusterConnected.set(node.connected ? 1 : 0);
      metrics.schemaCompatible.set(node.schemaCompatible ? 1 : 0);
      metrics.processingHolder.set(node.processing ? 1 : 0);
      return node.storePort.gauges(cutoffs).then((figures) => {
        if (figures?.forwarding) forwarding.gauges = figures.forwarding;
        return figures;
      });
    },
  };
}

/**
 * Erasures made anywhere reach this replica's spool (issue 45, subject-places.ts
 * `applyErasuresToSpool`): every {@link SPOOL_ERASURES_EVERY_MS} while connected, never two at once.
 */
function spoolErasures(node: ClusterNode, store: Store, logger: Logger) {
  const log = adminStore(node.storePort).subjects;
  const spool = adminStore(sqliteStorePort(store)).subjects;
  let running = false;
  let timer: NodeJS.Timeout | null = null;
  const run = async () => {
    if (running || !node.connected) return;
    running = true;
    try {
      await applyErasuresToSpool(log, spool, logger);
    } catch (err) {
      logger.warn(
        { err: (err as Error).message },
        'privacy: could not apply the erasures to the spool; trying again',
      );
    } finally {
      running = false;
    }
  };
  return {
    start: () => {
      timer ??= setInterval(() => void run(), SPOOL_ERASURES_EVERY_MS).unref();
    },
    stop: () => {
      if (timer !== null) clearInterval(timer);
      timer = null;
    },
  };
}

/**
 * openMigrated, giving the spool's lock back when the file cannot be used (a test's process goes
 * on). A replica's spool is its own (no other process or version opens it): always migrated, so a
 * new volume needs no step of its own.
 */
function openMigratedOrRelease(config: Config, logger: Logger, spoolLock: SpoolLock | null): Store {
  try {
    return openMigrated(config, logger, true, () => {});
  } catch (err) {
    spoolLock?.release();
    throw err;
  }
}

/**
 * Cluster mode's sending, in a thread of its own as in SQLite mode: the destinations' locks, the
 * `LISTEN` for new messages and a sender for each destination this replica holds
 * (runtime/cluster/forwarder.ts). An ingest-only replica (CLUSTER_CONCURRENCY=0) takes no destination; the
 * thread still listens, for the feed's long-polls, when the feed is on.
 */
function clusterSender(
  config: Config,
  target: PostgresTarget,
  options: StartOptions,
  deps: SharedParts,
): ForwardSenderThread | undefined {
  const { destinations, feedEnabled } = config.forwarding;
  if (destinations.length === 0 && !feedEnabled) return undefined;
  const { metrics } = deps;
  return new ForwardSenderThread({
    store: target,
    destinations: target.cluster.concurrency === 0 ? [] : destinations,
    logger: options.logger,
    pollIntervalMs: options.forwardPollMs,
    metrics: deps.senderMetrics,
    gate: deps.answers,
    tracing: deps.tracing,
    // A destination another replica now sends: its circuit is that replica's to report.
    onHeld: (destination, held) => {
      if (!held) metrics.forwardCircuit.set({ destination }, 0);
    },
    onNotify: feedEnabled ? () => deps.feedWaiters.notify() : undefined,
  });
}

/** The ClusterNode: the relay of the spool to PostgreSQL, the workers, retention and forwarding there. */
function buildCluster(
  config: Config,
  cluster: ClusterConfig,
  options: StartOptions,
  deps: SharedParts & {
    spool: Spool;
    inFlight: InFlightRequests;
    orderClock: OrderClock;
    sender: ForwardSenderThread | undefined;
  },
): ClusterNode {
  const { clock, metrics } = deps;
  return new ClusterNode({
    ...cluster,
    maxAttempts: config.handlerMaxAttempts,
    backoff: options.handlerBackoff ?? { baseMs: 1000, maxMs: 600_000 },
    schedule: deps.schedule,
    spool: deps.spool,
    oldestInFlight: () => deps.inFlight.oldest(),
    orderClock: deps.orderClock,
    gate: deps.answers,
    statusClient: deps.serviceClient,
    handlers: deps.partner,
    traces: deps.traces,
    // RETENTION_DAYS on PostgreSQL, once an hour cluster-wide (the spool's is composeCluster's).
    retention: config.retentionDays === undefined ? undefined : { days: config.retentionDays },
    outbox: { destinations: config.forwarding.destinations, feedEnabled: config.forwarding.feedEnabled },
    consoleTokens: consoleFingerprints(config),
    migrateOnStart: config.migrateOnStart,
    sender: deps.sender,
    logger: options.logger,
    now: () => clock.now(),
    metrics: {
      relayed: (_rows, delays) => {
        for (const d of delays) metrics.relayDelay.observe(d);
      },
      spoolReplaced: () => metrics.relaySpoolReplaced.set(1),
      relayError: () => metrics.relayErrors.inc(),
      processed: (evento, outcome) => metrics.eventsProcessed.inc({ evento, outcome }),
      handlerFailure: (evento) => metrics.handlerFailures.inc({ evento }),
      poll: (outcome) => metrics.polls.inc({ outcome }),
      beat: (beat) => {
        const at = beat.watermark.at;
        const now = deps.orderClock.now() ?? clock.now();
        metrics.watermarkLag.set(at === null ? 0 : Math.max(0, (now.getTime() - at.getTime()) / 1000));
        metrics.watermarkWaiting.set(beat.watermark.waiting.length);
        metrics.clockOffset.set(beat.clockOffsetMs / 1000);
        if (beat.reading !== null) clockReadingMetrics(metrics, beat.reading);
      },
      late: (rows) => metrics.relayedLate.inc(rows),
      gap: (_gap, resend) => {
        metrics.relayGaps.inc();
        metrics.relayResent.inc(resend);
      },
    },
  });
}

/** A heartbeat's reading of PostgreSQL's clock, into the metrics (issue 36, runtime/cluster/order-clock.ts). */
function clockReadingMetrics(metrics: Metrics, r: OrderReading): void {
  metrics.clockUncertainty.set(r.uncertaintyMs / 1000);
  if (r.wallStepMs !== null) metrics.clockSteps.inc({ clock: 'wall' });
  if (r.orderStepMs !== null) {
    metrics.clockSteps.inc({ clock: 'order' });
    metrics.clockStepDeliveries.inc(r.stampedOnStep);
  }
}

/** A replica's ClusterNode as Receiver.runtime shows it. */
function clusterRuntime(node: ClusterNode, sender: ForwardSenderThread | null): Runtime {
  return {
    get state() {
      return node.state;
    },
    get processing() {
      return node.processing;
    },
    readiness: () => node.readiness(),
    sender,
    nudge: () => node.nudge(),
    workerQueues: () => node.workerQueues(),
    // A replica's registry polls are pg-boss jobs, not this process's own.
    pollsSettled: async () => undefined,
  };
}
