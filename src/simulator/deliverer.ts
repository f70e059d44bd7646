import { randomUUID } from 'node:crypto';
import type { Clock } from '../clock';
import type { Logger } from '../logger';
import { isoBrasilia } from './brasilia-time';
import { eventPayload } from './event-examples';
import type { ResolvedChaos, ResolvedDelivery } from './options';
import type { Evento } from './service-flow';
import { signatureOf } from './signing';
import type { Timers } from './timers';

/**
 * The service's outbound side (interface §6.1): signed POSTs to registered callbacks, retried with
 * backoff, and the callback deactivated after consecutive failures. Every attempt is recorded.
 */

/** A callback registered with `POST /api/v1/webhooks` (interface §2.4, §4.5). */
export interface Registration {
  id: string;
  url: string;
  eventos: Evento[];
  secret: string;
  active: boolean;
  /** Failed attempts in a row to this registration; a success resets it (interface §6.1). */
  consecutiveFailures: number;
  createdAt: string;
  deactivatedAt: string | null;
}

export type DeliveryKind = 'event' | 'registry';

/** One logical delivery: one event (or registry result) to one registration. */
export interface DeliveryRecord {
  /** `metadata.webhook_id` for events; an internal id for registry results (their payload has none). */
  webhook_id: string;
  kind: DeliveryKind;
  registration_id: string;
  url: string;
  evento: Evento | null;
  nu_proposta: number | null;
  request_id: string | null;
  /** `abandoned`: retries stopped because the registration was deactivated or the simulator closed. */
  status: 'pending' | 'delivered' | 'failed' | 'abandoned';
  attempts: number;
}

/** One HTTP request to a callback. */
export interface AttemptRecord {
  webhook_id: string;
  kind: DeliveryKind;
  registration_id: string;
  url: string;
  evento: Evento | null;
  tentativa: number;
  /** True for the extra copy sent by `chaos.duplicateRate`. */
  duplicate: boolean;
  /** HTTP status of the answer; null when none came. */
  status: number | null;
  /** Why no answer counted: timeout, connection refused, … */
  error: string | null;
  ok: boolean;
  duration_ms: number;
  at: string;
}

export interface DelivererDeps {
  delivery: ResolvedDelivery;
  signatureHeader: string;
  chaos: () => ResolvedChaos;
  random: () => number;
  clock: Clock;
  logger: Logger;
  timers: Timers;
}

/** What `deliverEvent` / `deliverRegistry` started. */
export interface Started {
  webhookIds: string[];
  /** Resolves when the first attempt of every delivery has finished (answered, failed or timed out). */
  firstAttempts: Promise<void>;
}

/** Records kept in memory: a sandbox may run for days, so the oldest go first. */
const MAX_RECORDS = 10_000;

function pushCapped<T>(list: T[], item: T): void {
  list.push(item);
  if (list.length > MAX_RECORDS) list.splice(0, list.length - MAX_RECORDS);
}

function describeFetchError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = (err as { cause?: { code?: unknown; message?: unknown } }).cause;
  if (cause && typeof cause.code === 'string') return cause.code;
  if (cause && typeof cause.message === 'string') return cause.message;
  return err.message;
}

/** `http://x/webhooks` → `http://x/webhooks/registry` (the query string is kept). */
function registryUrl(registrationUrl: string): string {
  const url = new URL(registrationUrl);
  url.pathname = `${url.pathname.replace(/\/+$/, '')}/registry`;
  return url.href;
}

export class Deliverer {
  readonly registrations = new Map<string, Registration>();
  readonly deliveries: DeliveryRecord[] = [];
  readonly attempts: AttemptRecord[] = [];
  private readonly inflight = new Set<Promise<void>>();

  constructor(private readonly deps: DelivererDeps) {}

  register(url: string, eventos: Evento[], secret: string): Registration {
    const registration: Registration = {
      id: randomUUID(),
      url,
      eventos,
      secret,
      active: true,
      consecutiveFailures: 0,
      createdAt: isoBrasilia(this.deps.clock.now()),
      deactivatedAt: null,
    };
    this.registrations.set(registration.id, registration);
    this.deps.logger.info({ registration_id: registration.id, url, eventos }, 'webhook registered');
    return registration;
  }

  reactivate(id: string): Registration | undefined {
    const registration = this.registrations.get(id);
    if (registration === undefined) return undefined;
    registration.active = true;
    registration.consecutiveFailures = 0;
    registration.deactivatedAt = null;
    this.deps.logger.info({ registration_id: id, url: registration.url }, 'webhook registration reactivated');
    return registration;
  }

  /**
   * Sends `evento` to every active registration subscribed to it, each delivery with its own
   * `webhook_id` (interface §2.5). The timestamp is the event's, the same on every attempt.
   */
  deliverEvent(
    evento: Evento,
    dados: Record<string, unknown>,
    at: Date,
    refs: { nu_proposta: number | null; request_id: string | null },
  ): Started {
    const timestamp = isoBrasilia(at);
    const targets = [...this.registrations.values()].filter((r) => r.active && r.eventos.includes(evento));
    const started = targets.map((registration) => {
      const webhookId = randomUUID();
      const record: DeliveryRecord = {
        webhook_id: webhookId,
        kind: 'event',
        registration_id: registration.id,
        url: registration.url,
        evento,
        nu_proposta: refs.nu_proposta,
        request_id: refs.request_id,
        status: 'pending',
        attempts: 0,
      };
      const body = (tentativa: number) =>
        JSON.stringify(eventPayload(evento, timestamp, dados, { tentativa, webhook_id: webhookId }));
      return { webhookId, first: this.start(record, body) };
    });
    return {
      webhookIds: started.map((s) => s.webhookId),
      firstAttempts: Promise.all(started.map((s) => s.first)).then(() => undefined),
    };
  }

  /** Sends a registry result (interface §4.4) to `<url>/registry` of every active registration. */
  deliverRegistry(
    payload: Record<string, unknown>,
    refs: { nu_proposta: number | null; request_id: string },
  ): Started {
    const raw = JSON.stringify(payload);
    const targets = [...this.registrations.values()].filter((r) => r.active);
    const started = targets.map((registration) => {
      const record: DeliveryRecord = {
        webhook_id: randomUUID(),
        kind: 'registry',
        registration_id: registration.id,
        url: registryUrl(registration.url),
        evento: null,
        nu_proposta: refs.nu_proposta,
        request_id: refs.request_id,
        status: 'pending',
        attempts: 0,
      };
      return { webhookId: record.webhook_id, first: this.start(record, () => raw) };
    });
    return {
      webhookIds: started.map((s) => s.webhookId),
      firstAttempts: Promise.all(started.map((s) => s.first)).then(() => undefined),
    };
  }

  /** Resolves when every delivery started so far has finished its attempts (for shutdown). */
  async settled(): Promise<void> {
    while (this.inflight.size > 0) await Promise.all([...this.inflight]);
  }

  private start(record: DeliveryRecord, body: (tentativa: number) => string): Promise<void> {
    pushCapped(this.deliveries, record);
    let firstDone: () => void = () => undefined;
    const first = new Promise<void>((resolve) => (firstDone = resolve));
    const task = this.run(record, body, firstDone)
      .catch((err: unknown) => {
        this.deps.logger.error(
          { webhook_id: record.webhook_id, err: describeFetchError(err) },
          'delivery crashed',
        );
      })
      .finally(() => {
        firstDone();
        this.inflight.delete(task);
      });
    this.inflight.add(task);
    return first;
  }

  private async run(
    record: DeliveryRecord,
    body: (tentativa: number) => string,
    firstDone: () => void,
  ): Promise<void> {
    const { maxAttempts, backoffMs } = this.deps.delivery;
    const duplicate = this.deps.random() < this.deps.chaos().duplicateRate;
    for (let tentativa = 1; tentativa <= maxAttempts; tentativa++) {
      if (tentativa > 1) {
        const wait = backoffMs[Math.min(tentativa - 2, backoffMs.length - 1)] ?? 0;
        if (!(await this.deps.timers.sleep(wait))) {
          record.status = 'abandoned';
          return;
        }
      }
      const registration = this.registrations.get(record.registration_id);
      if (this.deps.timers.closed || registration === undefined || !registration.active) {
        record.status = 'abandoned';
        return;
      }
      const raw = body(tentativa);
      const ok = await this.attempt(record, registration, raw, tentativa, false);
      firstDone();
      if (ok) {
        record.status = 'delivered';
        // interface §6.1, rule 5: "Deliveries can repeat" — the same bytes again, as when the service misses the 200.
        if (duplicate && registration.active && !this.deps.timers.closed) {
          await this.attempt(record, registration, raw, tentativa, true);
        }
        return;
      }
    }
    record.status = 'failed';
  }

  /** One POST; returns true for a 200 (interface §6.1, rule 2: "The receiver confirms with HTTP 200"). */
  private async attempt(
    record: DeliveryRecord,
    registration: Registration,
    raw: string,
    tentativa: number,
    duplicate: boolean,
  ): Promise<boolean> {
    const { clock, timers, logger } = this.deps;
    const at = isoBrasilia(clock.now());
    const started = clock.monotonic();
    const { status, error } = await this.post(record.url, registration.secret, raw);
    const attempt: AttemptRecord = {
      webhook_id: record.webhook_id,
      kind: record.kind,
      registration_id: registration.id,
      url: record.url,
      evento: record.evento,
      tentativa,
      duplicate,
      status,
      error,
      ok: status === 200,
      duration_ms: Math.round(clock.monotonic() - started),
      at,
    };
    record.attempts += 1;
    pushCapped(this.attempts, attempt);
    const fields = {
      webhook_id: record.webhook_id,
      kind: record.kind,
      evento: record.evento ?? undefined,
      url: record.url,
      tentativa,
      duplicate: duplicate || undefined,
      status: status ?? undefined,
      error: error ?? undefined,
      duration_ms: attempt.duration_ms,
    };
    if (timers.closed && status === null) {
      // Cut short by close(): not the callback's fault, so not counted against it.
      logger.debug(fields, 'delivery attempt cut short by close');
      return false;
    }
    if (attempt.ok) {
      registration.consecutiveFailures = 0;
      logger.info(fields, 'delivery attempt answered 200');
      return true;
    }
    registration.consecutiveFailures += 1;
    logger.warn(
      { ...fields, consecutive_failures: registration.consecutiveFailures },
      'delivery attempt failed',
    );
    this.deactivateIfFailing(registration);
    return false;
  }

  /** The signed POST itself: the status of the answer, or why none came. */
  private async post(
    url: string,
    secret: string,
    raw: string,
  ): Promise<{ status: number | null; error: string | null }> {
    const { timers } = this.deps;
    const { timeoutMs } = this.deps.delivery;
    const timeout = AbortSignal.timeout(timeoutMs);
    try {
      const res = await fetch(url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          [this.deps.signatureHeader]: signatureOf(secret, raw),
          'user-agent': 'consig-simulator',
        },
        body: raw,
        redirect: 'manual',
        signal: AbortSignal.any([timeout, timers.signal]),
      });
      // Read the answer to free the connection; its content does not matter.
      await res.arrayBuffer().catch(() => undefined);
      return { status: res.status, error: null };
    } catch (err) {
      const error = timers.closed
        ? 'simulator closed'
        : timeout.aborted
          ? `no answer within ${timeoutMs} ms`
          : describeFetchError(err);
      return { status: null, error };
    }
  }

  /** interface §6.1, rule 4: "When the URL fails 3 times in a row, the webhook is deactivated automatically." */
  private deactivateIfFailing(registration: Registration): void {
    if (!registration.active || registration.consecutiveFailures < this.deps.delivery.deactivateAfterFailures)
      return;
    registration.active = false;
    registration.deactivatedAt = isoBrasilia(this.deps.clock.now());
    this.deps.logger.warn(
      {
        registration_id: registration.id,
        url: registration.url,
        consecutive_failures: registration.consecutiveFailures,
      },
      'webhook registration deactivated: nothing more is sent to it',
    );
  }
}
