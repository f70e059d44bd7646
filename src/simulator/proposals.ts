import { randomUUID } from 'node:crypto';
import type { Clock } from '../clock';
import { type Evento, isKnownEvento } from '../domain/catalogue';
import { EVENT_EFFECTS, HAPPY_PATH, type ProposalStatus } from '../domain/lifecycle';
import type { Logger } from '../logger';
import type { Deliverer } from './deliverer';
import type { ResolvedChaos } from './options';
import { isoBrasilia, type Timers } from './timers';

/**
 * Proposals on the service's side: the §2.1 rules, the automatic analysis, and the events sent for
 * each proposal, one at a time in the order they happen (a proposal's next event goes once the
 * first attempts of the previous one are over), unless chaos holds one back to swap a pair.
 */

/** The happy-path event after which each detour can happen (`proposta.cancelada`: any time). */
const DETOUR_AFTER: Partial<Record<Evento, Evento>> = {
  'proposta.negada': 'proposta.criada',
  'averbacao.negada': 'averbacao.solicitada',
  'pagamento.falha': 'efetivacao.concluida',
};

const FINAL_EVENTS: ReadonlySet<Evento> = new Set<Evento>([
  'proposta.negada',
  'proposta.cancelada',
  'averbacao.negada',
  'pagamento.realizado',
]);

export interface ProposalInput {
  nu_cpf: string;
  nu_cnpj_conveniada: string;
  vl_emprestimo: number;
  qt_parcela: number;
  dados_bancarios: Record<string, unknown>;
}

export type ProposalValidation =
  | { ok: true; value: ProposalInput }
  | { ok: false; status: 400; error: 'VALIDATION_ERROR'; field: string; message: string }
  | { ok: false; status: 422; error: 'BUSINESS_RULE_VIOLATION'; message: string };

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Seed §2.1 and §7. Messages are in Portuguese, like the service's. The first problem found is
 * reported, with the field it is about. An employee "not found in the company" is decided by
 * `isUnknownCpf`, since the simulator knows no payroll.
 */
export function validateProposal(body: unknown, isUnknownCpf: (cpf: string) => boolean): ProposalValidation {
  const invalid = (field: string, message: string): ProposalValidation => ({
    ok: false,
    status: 400,
    error: 'VALIDATION_ERROR',
    field,
    message,
  });
  if (!isObject(body)) return invalid('body', 'O corpo da requisição deve ser um objeto JSON');
  const { nu_cpf, nu_cnpj_conveniada, vl_emprestimo, qt_parcela, dados_bancarios } = body;
  if (nu_cpf === undefined || nu_cpf === null || nu_cpf === '')
    return invalid('nu_cpf', 'nu_cpf é obrigatório');
  if (typeof nu_cpf !== 'string' || !/^\d{11}$/.test(nu_cpf))
    return invalid('nu_cpf', 'nu_cpf deve conter exatamente 11 dígitos, sem pontuação');
  if (nu_cnpj_conveniada === undefined || nu_cnpj_conveniada === null || nu_cnpj_conveniada === '')
    return invalid('nu_cnpj_conveniada', 'nu_cnpj_conveniada é obrigatório');
  // 14 characters: digits, or the alphanumeric CNPJ (12 of [0-9A-Z] and two numeric check digits).
  if (typeof nu_cnpj_conveniada !== 'string' || !/^[0-9A-Z]{12}\d{2}$/.test(nu_cnpj_conveniada))
    return invalid(
      'nu_cnpj_conveniada',
      'nu_cnpj_conveniada deve ter 14 caracteres (dígitos ou o formato alfanumérico), sem pontuação',
    );
  if (vl_emprestimo === undefined || vl_emprestimo === null)
    return invalid('vl_emprestimo', 'vl_emprestimo é obrigatório');
  if (typeof vl_emprestimo !== 'number' || !Number.isFinite(vl_emprestimo) || vl_emprestimo <= 0)
    return invalid('vl_emprestimo', 'vl_emprestimo deve ser um número maior que zero');
  if (qt_parcela === undefined || qt_parcela === null)
    return invalid('qt_parcela', 'qt_parcela é obrigatório');
  if (typeof qt_parcela !== 'number' || !Number.isInteger(qt_parcela) || qt_parcela < 6 || qt_parcela > 96)
    return invalid('qt_parcela', 'qt_parcela deve ser um número inteiro entre 6 e 96');
  if (dados_bancarios === undefined || dados_bancarios === null)
    return invalid('dados_bancarios', 'dados_bancarios é obrigatório');
  if (!isObject(dados_bancarios)) return invalid('dados_bancarios', 'dados_bancarios deve ser um objeto');
  if (isUnknownCpf(nu_cpf))
    return {
      ok: false,
      status: 422,
      error: 'BUSINESS_RULE_VIOLATION',
      message: 'Funcionário não encontrado na empresa conveniada',
    };
  return { ok: true, value: { nu_cpf, nu_cnpj_conveniada, vl_emprestimo, qt_parcela, dados_bancarios } };
}

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
  /** Status after the last event planned for it (SPEC §6 names). */
  st_proposta: ProposalStatus;
  /** Index in HAPPY_PATH of the furthest happy-path event planned; -1 before any. */
  position: number;
  final: boolean;
  /** requestId of its latest averbação, carried in the dados of `averbacao.*` events. */
  requestId: string | null;
  events: SentEvent[];
}

interface ProposalRuntime {
  proposal: SimProposal;
  /** The chain of this proposal's sends: each waits for the previous one. */
  queue: Promise<void>;
  held: { event: SentEvent; send: () => Promise<void> } | null;
}

export type AdvancePlan = { ok: true; eventos: Evento[] } | { ok: false; message: string };

/**
 * Which events take `proposal` to `to` (or one step further when `to` is omitted): the rest of the
 * happy path up to it, or up to the point where a detour (`proposta.negada`, `averbacao.negada`,
 * `pagamento.falha`, `proposta.cancelada`) happens and then the detour.
 */
export function planAdvance(proposal: Pick<SimProposal, 'position' | 'final'>, to?: string): AdvancePlan {
  if (proposal.final) return { ok: false, message: 'the proposal is at a final status' };
  const { position } = proposal;
  if (to === undefined) {
    const next = HAPPY_PATH[position + 1];
    return next === undefined
      ? { ok: false, message: 'nothing left to advance' }
      : { ok: true, eventos: [next] };
  }
  if (!isKnownEvento(to)) return { ok: false, message: `unknown evento "${to}"` };
  const index = HAPPY_PATH.indexOf(to);
  if (index >= 0) {
    if (index <= position) return { ok: false, message: `the proposal is already past ${to}` };
    return { ok: true, eventos: HAPPY_PATH.slice(position + 1, index + 1) };
  }
  if (to === 'proposta.cancelada') return { ok: true, eventos: [to] };
  const after = HAPPY_PATH.indexOf(DETOUR_AFTER[to] as Evento);
  if (position > after) return { ok: false, message: `the proposal is already past the point of ${to}` };
  return { ok: true, eventos: [...HAPPY_PATH.slice(position + 1, after + 1), to] };
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
    const { proposal } = runtime;
    const index = HAPPY_PATH.indexOf(evento);
    if (index > proposal.position) proposal.position = index;
    if (FINAL_EVENTS.has(evento)) proposal.final = true;
    proposal.st_proposta = EVENT_EFFECTS[evento].status;
    // The dados are those of the moment the event happens, even if chaos sends it later.
    const dados: Record<string, unknown> = {
      nu_proposta: proposal.nu_proposta,
      nu_cpf: proposal.nu_cpf,
      st_proposta: proposal.st_proposta,
      vl_emprestimo: proposal.vl_emprestimo,
      no_conveniada: proposal.no_conveniada,
      uuid: proposal.uuid,
    };
    const requestId = evento.startsWith('averbacao.') ? (refs.requestId ?? proposal.requestId) : null;
    if (requestId !== null) dados.requestId = requestId;
    const event: SentEvent = { evento, state: 'queued', sent_at: null, webhook_ids: [] };
    proposal.events.push(event);
    const at = this.deps.clock.now();
    const send = (): Promise<void> => {
      if (this.deps.timers.closed) return Promise.resolve();
      event.state = 'sent';
      event.sent_at = isoBrasilia(this.deps.clock.now());
      const started = this.deps.deliverer.deliverEvent(evento, dados, at, {
        nu_proposta: proposal.nu_proposta,
        request_id: requestId,
      });
      event.webhook_ids.push(...started.webhookIds);
      this.deps.logger.info(
        { nu_proposta: proposal.nu_proposta, evento, deliveries: started.webhookIds.length },
        'event sent',
      );
      return started.firstAttempts;
    };
    const step = async (): Promise<void> => {
      if (this.deps.timers.closed) return;
      const held = runtime.held;
      if (held !== null) {
        // chaos.outOfOrder: this one goes first, then the one held back.
        runtime.held = null;
        await send();
        await held.send();
        return;
      }
      const chaos = this.deps.chaos();
      if (chaos.outOfOrder) {
        event.state = 'held';
        const slot = { event, send };
        runtime.held = slot;
        this.deps.timers.after(chaos.outOfOrderMaxHoldMs, () => {
          // No successor came in time: send it anyway, in the proposal's queue.
          this.enqueue(runtime, async () => {
            if (runtime.held !== slot) return;
            runtime.held = null;
            await send();
          });
        });
        return;
      }
      await send();
    };
    return this.enqueue(runtime, step);
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
