import { randomUUID } from 'node:crypto';
import type { Clock } from '../clock';
import type { Logger } from '../logger';
import { isoBrasilia } from './brasilia-time';
import type { Deliverer } from './deliverer';
import { registryResult } from './event-examples';
import type { RegistryOutcome, RegistryPayloadShape, RegistryWebhookMode, ResolvedRegistry } from './options';
import type { ProposalBook } from './service-proposals';
import type { RegistryStatus } from './service-flow';
import type { Timers } from './timers';

/**
 * The asynchronous averbação (interface §3.2, §4.2–§4.4). A request reads `queued`, then `processing` after
 * `processingAfterMs`, then its outcome after `completeAfterMs`, by the simulator's clock; when it
 * completes, the registry webhook goes (or is delayed or dropped) and, for a known proposal,
 * `averbacao.aprovada` or `averbacao.negada` follows.
 */

export interface SimAverbacao {
  requestId: string;
  correlationId: string;
  nu_proposta: number | null;
  path: '/contract/averbacao' | '/contract';
  created_at: string;
  /** Decided at creation (`registry.outcome`), revealed at completion. */
  outcome: RegistryOutcome;
  webhook_mode: RegistryWebhookMode;
  webhook_delay_ms: number;
  payload_shape: RegistryPayloadShape;
  /** When the completion timer ran; before that the status comes from the clock alone. */
  completed_at: string | null;
  webhook: 'pending' | 'sent' | 'dropped';
  webhook_ids: string[];
}

interface Runtime {
  record: SimAverbacao;
  createdAtMs: number;
  processingAfterMs: number;
  completeAfterMs: number;
}

export interface AverbacaoBookDeps {
  deliverer: Deliverer;
  proposals: ProposalBook;
  registry: () => ResolvedRegistry;
  clock: Clock;
  logger: Logger;
  timers: Timers;
}

/** `nu_proposta` of a request body, when it names one (a number or a string of digits). */
function proposalNumber(body: Record<string, unknown>): number | null {
  const nu = body.nu_proposta;
  const n = typeof nu === 'string' && /^\d+$/.test(nu) ? Number(nu) : nu;
  return typeof n === 'number' && Number.isSafeInteger(n) && n > 0 ? n : null;
}

export class AverbacaoBook {
  private readonly byId = new Map<string, Runtime>();

  constructor(private readonly deps: AverbacaoBookDeps) {}

  all(): (SimAverbacao & { status: RegistryStatus })[] {
    return [...this.byId.values()].map((r) => ({ ...r.record, status: this.statusOf(r) }));
  }

  start(body: Record<string, unknown>, path: SimAverbacao['path']): SimAverbacao {
    const settings = this.deps.registry();
    const requestId = randomUUID();
    const nu = proposalNumber(body);
    const now = this.deps.clock.now();
    const record: SimAverbacao = {
      requestId,
      correlationId: randomUUID(),
      nu_proposta: nu,
      path,
      created_at: isoBrasilia(now),
      outcome: settings.outcome(requestId, body),
      webhook_mode: settings.webhook,
      webhook_delay_ms: settings.webhookDelayMs,
      payload_shape: settings.payloadShape,
      completed_at: null,
      webhook: 'pending',
      webhook_ids: [],
    };
    const runtime: Runtime = {
      record,
      createdAtMs: now.getTime(),
      processingAfterMs: settings.processingAfterMs,
      completeAfterMs: settings.completeAfterMs,
    };
    this.byId.set(requestId, runtime);
    this.deps.logger.info(
      {
        request_id: requestId,
        nu_proposta: nu ?? undefined,
        path,
        outcome: record.outcome,
        webhook: record.webhook_mode,
      },
      'averbação queued',
    );
    const proposal = nu === null ? undefined : this.deps.proposals.get(nu);
    if (proposal !== undefined) {
      proposal.requestId = requestId;
      // "averbacao.solicitada: Registration sent to the partner company" (interface §6.2) — this is that moment,
      // unless the control API already said so.
      if (!proposal.events.some((e) => e.evento === 'averbacao.solicitada') && !proposal.final) {
        void this.deps.proposals.emit(proposal.nu_proposta, 'averbacao.solicitada', { requestId });
      }
    }
    this.deps.timers.after(settings.completeAfterMs, () => this.complete(runtime));
    return record;
  }

  /** The status `GET /request/:id` shows now, or undefined for an unknown id. */
  status(requestId: string): { record: SimAverbacao; status: RegistryStatus } | undefined {
    const runtime = this.byId.get(requestId);
    return runtime === undefined ? undefined : { record: runtime.record, status: this.statusOf(runtime) };
  }

  private statusOf(runtime: Runtime): RegistryStatus {
    const age = this.deps.clock.now().getTime() - runtime.createdAtMs;
    if (runtime.record.completed_at !== null || age >= runtime.completeAfterMs) return runtime.record.outcome;
    return age >= runtime.processingAfterMs ? 'processing' : 'queued';
  }

  private complete(runtime: Runtime): void {
    const { record } = runtime;
    record.completed_at = isoBrasilia(this.deps.clock.now());
    this.deps.logger.info({ request_id: record.requestId, status: record.outcome }, 'averbação finished');
    const payload = registryResult(
      {
        requestId: record.requestId,
        correlationId: record.correlationId,
        status: record.outcome,
        nu_proposta: record.nu_proposta,
      },
      record.payload_shape,
    );
    const sendWebhook = () => {
      record.webhook = 'sent';
      const started = this.deps.deliverer.deliverRegistry(payload, {
        nu_proposta: record.nu_proposta,
        request_id: record.requestId,
      });
      record.webhook_ids.push(...started.webhookIds);
    };
    if (record.webhook_mode === 'drop') {
      record.webhook = 'dropped';
      this.deps.logger.info(
        { request_id: record.requestId },
        'registry webhook dropped (chaos): poll for it',
      );
    } else if (record.webhook_mode === 'delay') {
      this.deps.timers.after(record.webhook_delay_ms, sendWebhook);
    } else {
      sendWebhook();
    }
    const proposal = record.nu_proposta === null ? undefined : this.deps.proposals.get(record.nu_proposta);
    if (proposal !== undefined) {
      void this.deps.proposals.emit(
        proposal.nu_proposta,
        record.outcome === 'completed' ? 'averbacao.aprovada' : 'averbacao.negada',
        { requestId: record.requestId },
      );
    }
  }
}
