import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import { EVENTOS } from './domain/catalogue';
import type { EventKind } from './domain/event-status';

export interface MetricsOptions {
  /**
   * Read at each scrape: whether background work waits for the answers now (AnswerFirst).
   * @default none (the gauge stays 0)
   */
  deferring?: () => boolean;
  /**
   * Node's process metrics (CPU, memory, event-loop lag) under `consig_`.
   * @default true
   */
  defaultMetrics?: boolean;
  /**
   * Read at each scrape: every destination's backlog, dead letters, oldest waiting delivery (ISO
   * time) and pause flag. A read that fails (the file locked) leaves the last values.
   * @default none (the forwarding gauges stay empty)
   */
  forwardingGauges?: () => readonly {
    destination: string;
    pending: number;
    dead: number;
    oldest_pending_at: string | null;
    paused: number;
  }[];
  /** For the age of the oldest delivery. @default Date.now */
  nowMs?: () => number;
  /** Cluster mode: the spool's deliveries not relayed yet, and the oldest one's received_at. */
  relayBacklog?: () => { count: number; oldestReceivedAt: string | null };
  /**
   * The destinations' names (FORWARD_URL's and DESTINATIONS_FILE's): their circuit state is
   * exported from the start, closed (0) until this process's sender reports it.
   * @default none
   */
  destinations?: readonly string[];
}

/**
 * The `evento` label of a handler run (pipeline.ts, runtime/cluster/turn.ts: `event.evento ?? event.kind`):
 * the catalogue's eventos, and the kind of an event that has none.
 */
const KINDS_WITHOUT_EVENTO: Record<Exclude<EventKind, 'event'>, null> = { registry: null, poll: null };
const HANDLER_RUN_EVENTOS: readonly string[] = [...EVENTOS, ...Object.keys(KINDS_WITHOUT_EVENTO)];
const HANDLER_RUN_OUTCOMES = ['done', 'retry', 'dead'] as const;

/**
 * Prometheus metrics. One Registry per running app (not prom-client's global one), so tests can
 * build many apps in one process. Each metric is one prom-client declaration, kept whole: name,
 * help, labels and buckets read together are the metric's documentation.
 */
// eslint-disable-next-line max-lines-per-function -- one declaration per metric, read together as the list of what /metrics exposes
export function createMetrics(options: MetricsOptions = {}) {
  const registry = new Registry();
  if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: registry, prefix: 'consig_' });

  const deliveries = new Counter({
    name: 'consig_webhook_deliveries_total',
    help: 'HTTP requests to the webhook routes, by outcome (accepted, duplicate, quarantined, invalid_signature, payload_too_large, storage_unavailable, aborted, forbidden)',
    labelNames: ['outcome', 'route'] as const,
    registers: [registry],
  });
  const ackLatency = new Histogram({
    name: 'consig_webhook_ack_seconds',
    help: 'Time from the start of a webhook request to its answer, by outcome',
    labelNames: ['outcome'] as const,
    buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [registry],
  });
  const eventsStored = new Counter({
    name: 'consig_events_stored_total',
    help: 'Events stored (new dedup keys), by evento and initial status',
    labelNames: ['evento', 'status'] as const,
    registers: [registry],
  });
  const commitBatchSize = new Histogram({
    name: 'consig_commit_batch_size',
    help: 'Requests written per SQLite transaction (group commit)',
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
    registers: [registry],
  });
  const commitSeconds = new Histogram({
    name: 'consig_commit_seconds',
    help: 'Duration of one group-commit transaction, fsync included',
    buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1],
    registers: [registry],
  });
  const commitFailures = new Counter({
    name: 'consig_commit_failures_total',
    help: 'Group-commit transactions that failed (each request in them got 503)',
    registers: [registry],
  });
  const auditRowsDropped = new Counter({
    name: 'consig_audit_rows_dropped_total',
    help: '`deliveries` audit rows lost: their write failed while the disk refused writes, beyond the rows kept for a later batch or at shutdown',
    registers: [registry],
  });
  // The deactivation alarm (interface §6.1, rule 4; src/domain/delivery-alarm.ts).
  const consecutiveFailedAnswers = new Gauge({
    name: 'consig_webhook_consecutive_failed_answers',
    help: 'Non-200 answers on the webhook routes since the last 200, of every kind (401, 403, 413, 400, 503), kept across restarts; the service deactivates the callback at 3 (interface §6.1)',
    registers: [registry],
  });
  const consecutiveInvalidSignatures = new Gauge({
    name: 'consig_webhook_consecutive_invalid_signatures',
    help: 'The 401s (invalid signature) in the current run of failed answers (consig_webhook_consecutive_failed_answers)',
    registers: [registry],
  });
  const deactivationAlarm = new Gauge({
    name: 'consig_webhook_deactivation_alarm',
    help: '1 while the run of failed answers is at 3 or more: the service has probably deactivated the callback (interface §6.1)',
    registers: [registry],
  });
  const secondsSinceLastDelivery = new Gauge({
    name: 'consig_webhook_seconds_since_last_delivery',
    help: 'Seconds since the last request reached a webhook route (any process on the database file; since the start when none is stored)',
    registers: [registry],
  });
  const silenceAlarm = new Gauge({
    name: 'consig_webhook_silence_alarm',
    help: '1 while no delivery came for DELIVERY_SILENCE_ALARM_MS and proposals are still in flight: the callback may be deactivated or unreachable',
    registers: [registry],
  });

  const queueDepth = new Gauge({
    name: 'consig_pipeline_queue_depth',
    help: 'Stored events known to the pipeline and not finished (running, waiting, or waiting for a retry)',
    registers: [registry],
  });
  // Answers first (issue 23): how long background work waited for the webhook answers.
  const backgroundDeferredSeconds = new Counter({
    name: 'consig_background_deferred_seconds_total',
    help: 'Seconds background work (processing, forwarding) waited so that webhook answers went first; its rate is the share of time the receiver is overloaded (the work waits in its backlog, nothing is dropped)',
    registers: [registry],
  });
  const backgroundDeferring = new Gauge({
    name: 'consig_background_deferring',
    help: 'Whether background work is waiting for the webhook answers right now (1) or runs (0)',
    registers: [registry],
    collect() {
      if (options.deferring) this.set(options.deferring() ? 1 : 0);
    },
  });
  const processingHolder = new Gauge({
    name: 'consig_processing_holder',
    help: 'Whether this process holds the processing lease (1) and runs the pipeline, poller and retention, or only ingests (0, standby)',
    registers: [registry],
  });
  const eventsProcessed = new Counter({
    name: 'consig_pipeline_events_processed_total',
    help: 'Handler runs by evento and outcome (done, retry, dead)',
    labelNames: ['evento', 'outcome'] as const,
    registers: [registry],
  });
  const handlerFailures = new Counter({
    name: 'consig_pipeline_handler_failures_total',
    help: 'Handler runs that threw (each is retried with backoff, or ends dead)',
    labelNames: ['evento'] as const,
    registers: [registry],
  });
  const eventsByStatus = new Gauge({
    name: 'consig_events',
    help: 'Events in the SQLite log by status (dead = dead letters, replayable)',
    labelNames: ['status'] as const,
    registers: [registry],
  });
  // Read at each scrape (src/http/metrics-route.ts); an alerting rule depends on each exact name.
  const pipelineLag = new Gauge({
    name: 'consig_pipeline_lag_seconds',
    help: 'Age in seconds of the oldest stored event not yet processed (pending, or failed and waiting for a retry; dead letters excluded), from when it was received; 0 when none',
    registers: [registry],
  });
  const proposalsStuck = new Gauge({
    name: 'consig_proposals_stuck',
    help: 'Proposals unchanged (updated_at) for longer than their status allows (STUCK_AFTER), by status; only statuses with a limit (final ones never are)',
    labelNames: ['status'] as const,
    registers: [registry],
  });

  const polls = new Counter({
    name: 'consig_registry_polls_total',
    help: 'GET /request/:requestId polls by outcome (ok, not_found, unauthorized, rate_limited, unavailable, error, stale)',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  const averbacoes = new Gauge({
    name: 'consig_averbacoes',
    help: 'Tracked registrations (averbações) by status',
    labelNames: ['status'] as const,
    registers: [registry],
  });
  const averbacoesStale = new Gauge({
    name: 'consig_averbacoes_stale',
    help: 'Registrations still not final after REGISTRY_POLL_MAX_AGE_MS (polling stopped)',
    registers: [registry],
  });
  const averbacoesWaiting = new Gauge({
    name: 'consig_averbacoes_waiting_poll',
    help: 'Registrations with a poll scheduled',
    registers: [registry],
  });
  const tokenRefreshes = new Counter({
    name: 'consig_service_token_refreshes_total',
    help: 'OAuth2 access tokens fetched from SERVICE_TOKEN_URL',
    registers: [registry],
  });

  // Forwarding (contract §8), per destination.
  const forwardAttempts = new Counter({
    name: 'consig_forward_attempts_total',
    help: 'Forwarding attempts by destination and outcome (delivered, temporary = will retry or dead when out of attempts, permanent = dead at once)',
    labelNames: ['destination', 'outcome'] as const,
    registers: [registry],
  });
  const forwardAttemptSeconds = new Histogram({
    name: 'consig_forward_attempt_seconds',
    help: 'Duration of one forwarding request, by destination',
    labelNames: ['destination'] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  });
  const forwardDeliverySeconds = new Histogram({
    name: 'consig_forward_delivery_seconds',
    help: 'Time from a message being stored to its delivery (retries and pauses included), by destination',
    labelNames: ['destination'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 60, 300, 1800, 3600, 21600, 86400],
    registers: [registry],
  });
  const forwardDeadTotal = new Counter({
    name: 'consig_forward_dead_total',
    help: 'Deliveries that went to the dead letter (permanent answer or out of attempts), by destination',
    labelNames: ['destination'] as const,
    registers: [registry],
  });
  const forwardCircuit = new Gauge({
    name: 'consig_forward_circuit_state',
    help: "A destination's circuit breaker: 0 closed, 1 half open (probing), 2 open (not sending)",
    labelNames: ['destination'] as const,
    registers: [registry],
  });
  const forwardBacklog = new Gauge({
    name: 'consig_forward_backlog',
    help: 'Deliveries waiting to be sent (pending, retries included), by destination',
    labelNames: ['destination'] as const,
    registers: [registry],
    // Registered first of the four scrape-time gauges, so its collect() fills them all.
    collect() {
      let rows;
      try {
        rows = options.forwardingGauges?.() ?? [];
      } catch {
        return;
      }
      const now = (options.nowMs ?? Date.now)();
      for (const r of rows) {
        const labels = { destination: r.destination };
        this.set(labels, r.pending);
        forwardDead.set(labels, r.dead);
        forwardPaused.set(labels, r.paused);
        const oldest = r.oldest_pending_at === null ? now : Date.parse(r.oldest_pending_at);
        forwardOldestPending.set(labels, Math.max(0, (now - oldest) / 1000));
      }
    },
  });
  const forwardOldestPending = new Gauge({
    name: 'consig_forward_oldest_pending_seconds',
    help: 'Age of the oldest delivery still waiting, by destination (0 when none)',
    labelNames: ['destination'] as const,
    registers: [registry],
  });
  const forwardDead = new Gauge({
    name: 'consig_forward_dead',
    help: 'Dead deliveries stored (replayable), by destination',
    labelNames: ['destination'] as const,
    registers: [registry],
  });
  const forwardPaused = new Gauge({
    name: 'consig_forward_paused',
    help: 'Whether a destination is paused (1): its messages accumulate',
    labelNames: ['destination'] as const,
    registers: [registry],
  });

  const relayBacklog = new Gauge({
    name: 'consig_relay_backlog',
    help: "Cluster mode: deliveries acknowledged from this replica's spool and not yet in PostgreSQL (0 when caught up)",
    registers: [registry],
    // Also fills consig_relay_lag_seconds: one spool read per scrape.
    collect() {
      if (!options.relayBacklog) return;
      let b;
      try {
        b = options.relayBacklog();
      } catch {
        return;
      }
      this.set(b.count);
      const now = (options.nowMs ?? Date.now)();
      relayLag.set(
        b.oldestReceivedAt === null ? 0 : Math.max(0, (now - Date.parse(b.oldestReceivedAt)) / 1000),
      );
    },
  });
  const relayLag = new Gauge({
    name: 'consig_relay_lag_seconds',
    help: "Cluster mode: age of the oldest delivery in this replica's spool not yet in PostgreSQL (0 when caught up): what this replica's disk alone holds",
    registers: [registry],
  });
  const relayDelay = new Histogram({
    name: 'consig_relay_delay_seconds',
    help: "Cluster mode: time from a delivery's acknowledgement to its commit in PostgreSQL",
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
    registers: [registry],
  });
  const relayErrors = new Counter({
    name: 'consig_relay_errors_total',
    help: 'Cluster mode: relay batches PostgreSQL refused or did not answer (each is tried again)',
    registers: [registry],
  });
  const watermarkLag = new Gauge({
    name: 'consig_cluster_watermark_lag_seconds',
    help: "Cluster mode: this replica's order clock (PostgreSQL's time as it estimates it) minus the hold-back watermark at its relay's last beat (events younger than this wait)",
    registers: [registry],
  });
  const watermarkWaiting = new Gauge({
    name: 'consig_cluster_watermark_waiting',
    help: 'Cluster mode: silent relays the watermark still waits for (until CLUSTER_HOLDBACK_MAX_MS drops them)',
    registers: [registry],
  });
  const clockOffset = new Gauge({
    name: 'consig_cluster_clock_offset_seconds',
    help: "Cluster mode: this replica's clock minus PostgreSQL's, measured at each relay heartbeat",
    registers: [registry],
  });
  const clockUncertainty = new Gauge({
    name: 'consig_cluster_clock_uncertainty_seconds',
    help: "Cluster mode: how far this replica's estimate of PostgreSQL's clock, which orders what it acknowledges, may be off (half its best round trip and 1 ms, plus drift); order across replicas is guaranteed while it is 0.025 or less",
    registers: [registry],
  });
  const clockSteps = new Counter({
    name: 'consig_cluster_clock_steps_total',
    help: 'Cluster mode: steps found at a relay heartbeat: clock="wall", this replica\'s wall clock stepped (received_at jumps; order is unaffected); clock="order", its estimate of PostgreSQL\'s clock moved by more than its uncertainty (a resumed VM, PostgreSQL\'s clock stepped)',
    labelNames: ['clock'] as const,
    registers: [registry],
  });
  const clockStepDeliveries = new Counter({
    name: 'consig_cluster_clock_step_deliveries_total',
    help: "Cluster mode: requests this replica stamped between two heartbeats across which its estimate of PostgreSQL's clock stepped: their order against other replicas' deliveries of that moment may be off by up to the step",
    registers: [registry],
  });
  const relayedLate = new Counter({
    name: 'consig_relay_late_total',
    help: 'Cluster mode: events this replica relayed after the watermark had passed them (it had been dropped from it): processed out of order',
    registers: [registry],
  });
  const relayGaps = new Counter({
    name: 'consig_relay_gaps_total',
    help: 'Cluster mode: times this replica found PostgreSQL lacking deliveries its spool had relayed (a failover lost commits) and sent them again',
    registers: [registry],
  });
  const relayResent = new Counter({
    name: 'consig_relay_resent_total',
    help: 'Cluster mode: spooled deliveries relayed again because PostgreSQL had lost them (see consig_relay_gaps_total)',
    registers: [registry],
  });
  const clusterConnected = new Gauge({
    name: 'consig_cluster_connected',
    help: 'Cluster mode: 1 while this replica reaches PostgreSQL (a heartbeat every 5 s) with its relay and workers started; 0 within about 10 s of losing it',
    registers: [registry],
  });
  const schemaCompatible = new Gauge({
    name: 'consig_schema_compatible',
    help: "1 while this receiver runs on its database's schema; cluster mode: 0 while this replica refuses PostgreSQL's (a newer one with a breaking migration its code does not know, or one behind while MIGRATE_ON_START=false): not ready, webhooks answered 503, nothing relayed or processed",
    registers: [registry],
  });
  // SQLite mode refuses at start instead (the process does not run): 1 from the start.
  schemaCompatible.set(1);
  const relaySpoolReplaced = new Gauge({
    name: 'consig_relay_spool_replaced',
    help: 'Cluster mode: 1 when this replica started on a spool PostgreSQL did not know while it knew another one of the same REPLICA_ID (a lost or replaced volume: what the old spool acknowledged and never relayed is lost); stays 1 until the process stops',
    registers: [registry],
  });

  const traceSpansDropped = new Counter({
    name: 'consig_trace_spans_dropped_total',
    help: 'Tracing (OTEL_TRACES_EXPORTER=otlp): spans never exported, by reason (queue_full: the batch queue, OTEL_BSP_MAX_QUEUE_SIZE, was full; export_failed: the collector refused them or could not be reached); from the main thread and the forwarding thread',
    labelNames: ['reason'] as const,
    registers: [registry],
  });

  // Issue 44: every labelled series an alerting rule reads (deploy/prometheus/alerts.yml) exists
  // from the start, at 0, for each label value known here, in both modes: `increase()` and `rate()`
  // see no increase in a series that first appears at 1, so a rule on a series born at its first
  // event misses that event (ConsigOrderClockStepped never paged on a replica's first step). In
  // SQLite mode the cluster series read 0 like the unlabelled ones: no relay, no step.
  // consig_webhook_deliveries_total's are the webhook routes' (http/webhook-handler.ts); the
  // gauges read from the store are set at each scrape, every known label value included.
  // test/integration/alert-series.test.ts and cluster-alert-series.test.ts check it rule by rule.
  for (const clock of ['wall', 'order'] as const) clockSteps.inc({ clock }, 0);
  for (const evento of HANDLER_RUN_EVENTOS)
    for (const outcome of HANDLER_RUN_OUTCOMES) eventsProcessed.inc({ evento, outcome }, 0);
  for (const destination of options.destinations ?? []) forwardCircuit.set({ destination }, 0);

  return {
    registry,
    traceSpansDropped,
    backgroundDeferredSeconds,
    backgroundDeferring,
    relayBacklog,
    relayLag,
    relayDelay,
    relayErrors,
    watermarkLag,
    watermarkWaiting,
    clockOffset,
    clockUncertainty,
    clockSteps,
    clockStepDeliveries,
    relayedLate,
    relayGaps,
    relayResent,
    clusterConnected,
    schemaCompatible,
    relaySpoolReplaced,
    deliveries,
    ackLatency,
    eventsStored,
    commitBatchSize,
    commitSeconds,
    commitFailures,
    auditRowsDropped,
    consecutiveFailedAnswers,
    consecutiveInvalidSignatures,
    deactivationAlarm,
    secondsSinceLastDelivery,
    silenceAlarm,
    queueDepth,
    processingHolder,
    eventsProcessed,
    handlerFailures,
    eventsByStatus,
    pipelineLag,
    proposalsStuck,
    polls,
    averbacoes,
    averbacoesStale,
    averbacoesWaiting,
    tokenRefreshes,
    forwardAttempts,
    forwardAttemptSeconds,
    forwardDeliverySeconds,
    forwardDeadTotal,
    forwardCircuit,
    forwardBacklog,
    forwardOldestPending,
    forwardDead,
    forwardPaused,
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
