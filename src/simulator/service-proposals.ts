import { randomUUID } from 'node:crypto';
import type { Clock } from '../clock';
import type { Logger } from '../logger';
import { isoBrasilia } from './brasilia-time';
import type { Deliverer } from './deliverer';
import { EVENT_DADOS, eventDados, type StProposta } from './event-examples';
import type { ResolvedChaos } from './options';
import type { ProposalInput } from './proposal-rules';
import { type Evento, FINAL_EVENTS, HAPPY_PATH } from './service-flow';
import type { Timers } from './timers';

/**
 * Proposals on the service's side and the events sent for each, one at a time in the order they
 * happen (a proposal's next event goes once the first attempts of the previous one are over),
 * unless chaos holds one back to swap a pair.
 */

export interface SentEvent {
  evento: Evento;
  /** `queued`: waiting for the proposal's previous event; `held`: kept back by chaos.outOfOrder. */
  state: 'queued' | 'held' | 'sent';
  /** When it was sent; null until then. */
  sent_at: string | null;
  webhook_ids: string[];
}

export interface SimProposal {
  nu_proposta: number;
  uuid: string;
  nu_cpf: string;
  nu_cnpj_conveniada: string;
  vl_emprestimo: number;
  qt_parcela: number;
  no_conveniada: string;
  dt_criacao: string;
  /** `st_proposta` of the last event planned for it. */
  st_proposta: StProposta;
  /** Index in HAPPY_PATH of the furthest happy-path event planned; -1 before any. */
  position: number;
  final: boolean;
  /** requestId of its latest averbação, carried in the dados of `averbacao.*` events. */
  requestId: string | null;
  events: SentEvent[];
}

interface PlannedEvent {
  event: SentEvent;
  send: () => Promise<void>;
}

interface ProposalRuntime {
  proposal: SimProposal;
  /** The chain of this proposal's sends: each waits for the previous one. */
  queue: Promise<void>;
  held: PlannedEvent | null;
}

/** A company name for a CNPJ: the simulator knows no registry of companies. */
function companyName(cnpj: string): string {
  return `Conveniada ${cnpj.slice(0, 8)} Ltda`;
}

export interface ProposalBookDeps {
  deliverer: Deliverer;
  chaos: () => ResolvedChaos;
  clock: Clock;
  logger: Logger;
  timers: Timers;
}

export class ProposalBook {
  private readonly byNumber = new Map<number, ProposalRuntime>();
  private nextNumber = 100001;

  constructor(private readonly deps: ProposalBookDeps) {}

  get(nu: number): SimProposal | undefined {
    return this.byNumber.get(nu)?.proposal;
  }

  all(): SimProposal[] {
    return [...this.byNumber.values()].map((r) => r.proposal);
  }

  create(input: ProposalInput): SimProposal {
    const proposal: SimProposal = {
      nu_proposta: this.nextNumber++,
      uuid: randomUUID(),
      nu_cpf: input.nu_cpf,
      nu_cnpj_conveniada: input.nu_cnpj_conveniada,
      vl_emprestimo: input.vl_emprestimo,
      qt_parcela: input.qt_parcela,
      no_conveniada: companyName(input.nu_cnpj_conveniada),
      dt_criacao: isoBrasilia(this.deps.clock.now()),
      st_proposta: 'em_analise',
      position: -1,
      final: false,
      requestId: null,
      events: [],
    };
    this.byNumber.set(proposal.nu_proposta, { proposal, queue: Promise.resolve(), held: null });
    this.deps.logger.info(
      {
        nu_proposta: proposal.nu_proposta,
        vl_emprestimo: proposal.vl_emprestimo,
        qt_parcela: proposal.qt_parcela,
      },
      'proposal created',
    );
    return proposal;
  }

  /**
   * Plans `evento` for the proposal now (its status moves at once) and queues its delivery after the
   * proposal's earlier events. Resolves when its first attempts are over (or it is held).
   */
  emit(nu: number, evento: Evento, refs: { requestId?: string } = {}): Promise<void> {
    const runtime = this.byNumber.get(nu);
    if (runtime === undefined) throw new Error(`unknown proposal ${nu}`);
    const send = this.plan(runtime.proposal, evento, refs.requestId);
    return this.enqueue(runtime, () => this.sendInTurn(runtime, send));
  }

  /** Moves the proposal by `evento` and returns the send of that event, with the dados of this moment. */
  private plan(proposal: SimProposal, evento: Evento, requestId?: string): PlannedEvent {
    const index = HAPPY_PATH.indexOf(evento);
    if (index > proposal.position) proposal.position = index;
    if (FINAL_EVENTS.has(evento)) proposal.final = true;
    proposal.st_proposta = EVENT_DADOS[evento].st_proposta;
    // The dados are those of the moment the event happens, even if chaos sends it later.
    const dados = eventDados(evento, proposal, requestId ?? proposal.requestId);
    const requestRef = typeof dados.requestId === 'string' ? dados.requestId : null;
    const event: SentEvent = { evento, state: 'queued', sent_at: null, webhook_ids: [] };
    proposal.events.push(event);
    const at = this.deps.clock.now();
    const send = (): Promise<void> => {
      if (this.deps.timers.closed) return Promise.resolve();
      event.state = 'sent';
      event.sent_at = isoBrasilia(this.deps.clock.now());
      const started = this.deps.deliverer.deliverEvent(evento, dados, at, {
        nu_proposta: proposal.nu_proposta,
        request_id: requestRef,
      });
      event.webhook_ids.push(...started.webhookIds);
      this.deps.logger.info(
        { nu_proposta: proposal.nu_proposta, evento, deliveries: started.webhookIds.length },
        'event sent',
      );
      return started.firstAttempts;
    };
    return { event, send };
  }

  /** The proposal's turn has come: send, or (chaos.outOfOrder) swap with the event held back. */
  private async sendInTurn(runtime: ProposalRuntime, next: PlannedEvent): Promise<void> {
    if (this.deps.timers.closed) return;
    const held = runtime.held;
    if (held !== null) {
      // chaos.outOfOrder: this one goes first, then the one held back.
      runtime.held = null;
      await next.send();
      await held.send();
      return;
    }
    const chaos = this.deps.chaos();
    if (!chaos.outOfOrder) return next.send();
    next.event.state = 'held';
    runtime.held = next;
    this.deps.timers.after(chaos.outOfOrderMaxHoldMs, () => {
      // No successor came in time: send it anyway, in the proposal's queue.
      this.enqueue(runtime, async () => {
        if (runtime.held !== next) return;
        runtime.held = null;
        await next.send();
      });
    });
  }

  private enqueue(runtime: ProposalRuntime, step: () => Promise<void>): Promise<void> {
    const next = runtime.queue.then(step).catch((err: unknown) => {
      this.deps.logger.error(
        { nu_proposta: runtime.proposal.nu_proposta, err: err instanceof Error ? err.message : String(err) },
        'sending an event failed',
      );
    });
    runtime.queue = next;
    return next;
  }
}
