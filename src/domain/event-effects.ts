import type { Evento, RegistryStatus } from './catalogue';
import { isKnownEvento } from './catalogue';
import { nonBlankString, own } from './json';
import { normalizeDados, type ProposalData } from './normalize';
import {
  firstPollAt,
  isFinalRegistryStatus,
  mergeRegistryStatus,
  type PollScheduleOptions,
} from './registry';

/**
 * What an event does, decided from the state its handler loaded (contract §6, interface §4.4),
 * as a list of effects for a store to apply in the event's transaction. The SQLite pipeline and the
 * PostgreSQL turn (cluster mode) load the same state and apply the same effects, each in its own
 * store: the rules live here once (issue 13: "one life cycle, two stores"). Pure: no I/O, no clock
 * (`nowMs` is passed in).
 */

/** The facts of a stored event a decision needs (the pipeline's HandlerEvent has them all). */
export interface EventFacts {
  readonly id: number;
  readonly kind: 'event' | 'registry' | 'poll';
  readonly evento: string | null;
  readonly nuProposta: number | string | null;
  readonly requestId: string | null;
  readonly registryStatus: string | null;
  readonly rawBody: string | null;
  readonly payload: unknown;
  readonly dados: unknown;
}

/** What the life-cycle handler needs to load, or why the event moves no proposal. */
export type LifecycleInput =
  | {
      readonly move: true;
      readonly nu: number | string;
      readonly evento: Evento;
      readonly data: ProposalData;
    }
  | { readonly move: false; readonly reason: 'not_lifecycle' | 'no_nu_proposta' };

/**
 * Whether `event` is a life-cycle event and for which proposal. The store then loads that
 * proposal's status and applies `transition(status, evento)` (domain/lifecycle.ts).
 */
/**
 * The line a life-cycle event that cannot move anything is worth (one without `nu_proposta`);
 * null for an event that is simply not a life-cycle one. Logged as `logger.warn(fields, message)`.
 */
export function lifecycleSkipLog(
  event: Pick<EventFacts, 'id' | 'evento'>,
  input: LifecycleInput,
): { fields: Record<string, unknown>; message: string } | null {
  if (input.move || input.reason !== 'no_nu_proposta') return null;
  return {
    fields: { event_id: event.id, evento: event.evento },
    message: 'life-cycle event without nu_proposta: nothing to move',
  };
}

export function lifecycleInput(event: EventFacts): LifecycleInput {
  if (event.kind !== 'event' || event.evento === null || !isKnownEvento(event.evento))
    return { move: false, reason: 'not_lifecycle' };
  const data = normalizeDados(event.dados);
  const nu = event.nuProposta ?? data.nu_proposta;
  if (nu === null) return { move: false, reason: 'no_nu_proposta' };
  return { move: true, nu, evento: event.evento, data };
}

/** The tracked registration as a handler loads it (a row of `averbacoes`). */
export interface AverbacaoState {
  readonly status: RegistryStatus;
  readonly correlation_id: string | null;
  readonly nu_proposta: number | string | null;
}

export type TrackedVia = 'started' | 'declared' | 'event' | 'registry';

/** One change to `averbacoes` (or a log line) decided for an event. */
export type RegistryEffect =
  | {
      readonly type: 'track';
      readonly requestId: string;
      readonly correlationId: string | null;
      readonly nuProposta: number | string | null;
      readonly status: RegistryStatus;
      readonly via: TrackedVia;
      /** ISO time of the first poll; null: never poll (already final). */
      readonly nextPollAt: string | null;
    }
  | {
      readonly type: 'fill';
      readonly requestId: string;
      readonly correlationId: string | null;
      readonly nuProposta: number | string | null;
    }
  | { readonly type: 'set_status'; readonly requestId: string; readonly status: RegistryStatus }
  | {
      readonly type: 'set_final';
      readonly requestId: string;
      readonly status: RegistryStatus;
      readonly source: 'webhook' | 'poll';
      readonly body: string | null;
      readonly eventId: number;
    }
  | {
      readonly type: 'log';
      readonly level: 'info' | 'warn';
      readonly fields: Readonly<Record<string, unknown>>;
      readonly message: string;
    };

/** correlationId at the top level or under `dados` (the webhook's shape is "not shown", interface §6.2). */
function correlationIdOf(event: EventFacts): string | null {
  return (
    nonBlankString(own(event.payload, 'correlationId')) ?? nonBlankString(own(event.dados, 'correlationId'))
  );
}

const firstPoll = (nowMs: number, schedule: PollScheduleOptions): string =>
  new Date(firstPollAt(nowMs, schedule)).toISOString();

/**
 * The tracking a registration declared here (the `track` command, `POST /admin/averbacoes/track`)
 * or started through the service's client begins with: `queued` until the service says more, first
 * poll after the webhook's grace. A decision, as the other effects here: both stores write it
 * through core/effects.ts `startTracking`.
 */
export function newTracking(
  t: {
    requestId: string;
    correlationId: string | null;
    nuProposta: number | string | null;
    via: 'declared' | 'started';
  },
  nowMs: number,
  schedule: Pick<PollScheduleOptions, 'graceMs'>,
): Extract<RegistryEffect, { type: 'track' }> {
  return {
    type: 'track',
    ...t,
    status: 'queued',
    nextPollAt: new Date(firstPollAt(nowMs, schedule)).toISOString(),
  };
}

/**
 * A registry result (the webhook of interface §4.4, kind `registry`) or a poll answer (kind
 * `poll`), given the registration as loaded (`current`, null when not tracked). Whichever of webhook
 * and poll brings the final status first wins; the other is a no-op.
 */
export function registryResultEffects(
  event: EventFacts,
  current: AverbacaoState | null,
  nowMs: number,
  schedule: PollScheduleOptions,
): RegistryEffect[] {
  const requestId = registrationOf('registry_results', event);
  if (requestId === null) return [];
  const source = event.kind === 'poll' ? 'poll' : 'webhook';
  const merge = mergeRegistryStatus(current?.status ?? null, event.registryStatus);
  const final = (status: RegistryStatus): RegistryEffect => ({
    type: 'set_final',
    requestId,
    status,
    source,
    body: event.rawBody,
    eventId: event.id,
  });
  if (current === null) {
    // A result for a registration nobody declared here: track it from now on.
    const status: RegistryStatus = merge.status ?? 'queued';
    const isFinal = isFinalRegistryStatus(status);
    const track: RegistryEffect = {
      type: 'track',
      requestId,
      correlationId: correlationIdOf(event),
      nuProposta: event.nuProposta,
      status,
      via: 'registry',
      nextPollAt: isFinal ? null : firstPoll(nowMs, schedule),
    };
    return isFinal ? [track, final(status)] : [track];
  }
  const effects: RegistryEffect[] = [];
  // interface §2.3: the status query (and maybe the webhook) carries the correlationId; a
  // registration tracked by its requestId alone learns it from the first result that has one.
  const correlationId = correlationIdOf(event);
  if (current.correlation_id === null && correlationId !== null)
    effects.push({ type: 'fill', requestId, correlationId, nuProposta: event.nuProposta });
  if (!merge.apply || merge.status === null) {
    if (merge.reason === 'unknown_status')
      effects.push({
        type: 'log',
        level: 'warn',
        fields: { request_id: requestId, status: event.registryStatus, event_id: event.id },
        message: 'registry result with an unknown status: kept, not applied',
      });
    return effects;
  }
  if (!isFinalRegistryStatus(merge.status)) {
    effects.push({ type: 'set_status', requestId, status: merge.status });
    return effects;
  }
  const fields = { request_id: requestId, status: merge.status, source, nu_proposta: current.nu_proposta };
  effects.push(
    final(merge.status),
    merge.status === 'error'
      ? {
          type: 'log',
          level: 'warn',
          fields,
          message: 'averbação ended in error (definitive failure, interface §3.2)',
        }
      : { type: 'log', level: 'info', fields, message: 'averbação completed' },
  );
  return effects;
}

/**
 * The registration a registry stage works on for `event`, or null when the stage has nothing to do
 * (no statement, no log line): the event step then skips it, and makes no span for it
 * (docs/operating.md "Tracing"). Registry results and poll answers name theirs; any other event
 * whose `dados` carries a `requestId` starts tracking it.
 */
export function registrationOf(
  stage: 'registry_tracking' | 'registry_results',
  event: Pick<EventFacts, 'kind' | 'requestId'>,
): string | null {
  return stage === 'registry_tracking' && event.kind !== 'event' ? null : event.requestId;
}

/** Any event whose `dados` carries a `requestId` starts tracking it (a no-op when tracked already). */
export function trackFromEventEffects(
  event: EventFacts,
  nowMs: number,
  schedule: PollScheduleOptions,
): RegistryEffect[] {
  const requestId = registrationOf('registry_tracking', event);
  if (requestId === null) return [];
  return [
    {
      type: 'track',
      requestId,
      correlationId: correlationIdOf(event),
      nuProposta: event.nuProposta,
      status: 'queued',
      via: 'event',
      nextPollAt: firstPoll(nowMs, schedule),
    },
  ];
}
