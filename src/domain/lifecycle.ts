import type { Evento, Stage } from './catalogue';

/**
 * The proposal life cycle of SPEC §6 as a pure state machine: what each catalogue event does to a
 * proposal, given only the status it is at. No I/O and no clock, so handlers can run it inside a
 * transaction and tests can replay any delivery order (deliveries repeat and arrive out of order).
 */

/** Every status a proposal can be at (SPEC §6, column "status"). */
export type ProposalStatus =
  | 'em_analise'
  | 'pre_aprovada'
  | 'aprovada'
  | 'negada'
  | 'cancelada'
  | 'averbacao_solicitada'
  | 'averbada'
  | 'averbacao_negada'
  | 'formalizacao_iniciada'
  | 'formalizada'
  | 'efetivada'
  | 'pagamento_falhou'
  | 'paga';

type FinalStatus = 'negada' | 'cancelada' | 'averbacao_negada' | 'paga';
type NonFinalStatus = Exclude<ProposalStatus, FinalStatus>;

/** The happy path of a proposal through the five stages (seed §1), in order. */
export const HAPPY_PATH: readonly Evento[] = [
  'proposta.criada',
  'proposta.pre_aprovada',
  'proposta.aprovada',
  'averbacao.solicitada',
  'averbacao.aprovada',
  'formalizacao.iniciada',
  'formalizacao.concluida',
  'efetivacao.concluida',
  'pagamento.realizado',
];

/** SPEC §6 table, all 13 rows: the stage an event belongs to and the status it sets. */
export const EVENT_EFFECTS: Readonly<Record<Evento, { stage: Stage; status: ProposalStatus }>> =
  Object.freeze({
    'proposta.criada': { stage: 'Proposta', status: 'em_analise' },
    'proposta.pre_aprovada': { stage: 'Proposta', status: 'pre_aprovada' },
    'proposta.aprovada': { stage: 'Proposta', status: 'aprovada' },
    'proposta.negada': { stage: 'Proposta', status: 'negada' },
    'proposta.cancelada': { stage: 'Proposta', status: 'cancelada' },
    'averbacao.solicitada': { stage: 'Averbação', status: 'averbacao_solicitada' },
    'averbacao.aprovada': { stage: 'Averbação', status: 'averbada' },
    'averbacao.negada': { stage: 'Averbação', status: 'averbacao_negada' },
    'formalizacao.iniciada': { stage: 'Formalização', status: 'formalizacao_iniciada' },
    'formalizacao.concluida': { stage: 'Formalização', status: 'formalizada' },
    'efetivacao.concluida': { stage: 'Efetivação', status: 'efetivada' },
    'pagamento.falha': { stage: 'Pagamento', status: 'pagamento_falhou' },
    'pagamento.realizado': { stage: 'Pagamento', status: 'paga' },
  });

/** The statuses marked "(final)" in SPEC §6: nothing moves a proposal out of them. */
export const FINAL_STATUSES: ReadonlySet<ProposalStatus> = new Set<FinalStatus>([
  'negada',
  'cancelada',
  'averbacao_negada',
  'paga',
]);

// SPEC §6: "Non-final statuses are ordered as listed." An event to a non-final status moves a
// proposal only to a higher rank.
const RANK: Readonly<Record<NonFinalStatus, number>> = {
  em_analise: 0,
  pre_aprovada: 1,
  aprovada: 2,
  averbacao_solicitada: 3,
  averbada: 4,
  formalizacao_iniciada: 5,
  formalizada: 6,
  efetivada: 7,
  pagamento_falhou: 8,
};

// Stages in the order SPEC §6 lists them; a final event applies only from its own stage or an
// earlier one (a cancellation of the proposal stage arriving after efetivação is late).
const STAGE_INDEX: Readonly<Record<Stage, number>> = {
  Proposta: 0,
  Averbação: 1,
  Formalização: 2,
  Efetivação: 3,
  Pagamento: 4,
};

// Each status is set by exactly one event (SPEC §6), so its stage is that event's stage.
const STATUS_STAGE: Readonly<Record<ProposalStatus, Stage>> = {
  em_analise: 'Proposta',
  pre_aprovada: 'Proposta',
  aprovada: 'Proposta',
  negada: 'Proposta',
  cancelada: 'Proposta',
  averbacao_solicitada: 'Averbação',
  averbada: 'Averbação',
  averbacao_negada: 'Averbação',
  formalizacao_iniciada: 'Formalização',
  formalizada: 'Formalização',
  efetivada: 'Efetivação',
  pagamento_falhou: 'Pagamento',
  paga: 'Pagamento',
};

function isFinalStatus(s: ProposalStatus): s is FinalStatus {
  return FINAL_STATUSES.has(s);
}

/** Whether `s` is final (SPEC §6): every later event is recorded but does not move the proposal. */
export function isFinal(s: ProposalStatus): boolean {
  return isFinalStatus(s);
}

/** The stage a status belongs to (the stage of the one event that sets it, SPEC §6). */
export function stageOf(s: ProposalStatus): Stage {
  return STATUS_STAGE[s];
}

/**
 * Why a transition was or was not applied:
 * - `created`: first event seen for the proposal (applied);
 * - `forward`: to a non-final status of higher rank (applied);
 * - `final`: to a final status from the same or an earlier stage (applied);
 * - `payment_retried`: `pagamento.realizado` after `pagamento_falhou` (applied);
 * - `same_status`: a repeat of the current status (not applied);
 * - `late`: an event of an earlier rank or stage arriving out of order (not applied);
 * - `after_final`: anything once the proposal is final (not applied).
 */
export type TransitionReason =
  'created' | 'forward' | 'final' | 'payment_retried' | 'same_status' | 'late' | 'after_final';

/** The outcome of one event on one proposal; what a handler records (`applied = 0` in SPEC §6). */
export interface Transition {
  evento: Evento;
  /** The status before the event; null when the proposal had not been seen. */
  from: ProposalStatus | null;
  /** The status the event sets; the proposal is at it only when `applied`, otherwise it stays at `from`. */
  to: ProposalStatus;
  /** The stage of the event (SPEC §6). */
  stage: Stage;
  applied: boolean;
  reason: TransitionReason;
}

/** What `evento` does to a proposal currently at `current` (null = not seen before). */
export function transition(current: ProposalStatus | null, evento: Evento): Transition {
  const { stage, status: to } = EVENT_EFFECTS[evento];
  const outcome = (applied: boolean, reason: TransitionReason): Transition => ({
    evento,
    from: current,
    to,
    stage,
    applied,
    reason,
  });

  // SPEC §6: "A proposal first seen mid-way … is created at that point", even at a final status.
  if (current === null) return outcome(true, 'created');
  // SPEC §6: "anything after a final status … does not move it", a repeat of that final event included.
  if (isFinalStatus(current)) return outcome(false, 'after_final');

  if (isFinalStatus(to)) {
    // SPEC §6: "`pagamento.realizado` after `pagamento_falhou` applies (payment retried)".
    if (evento === 'pagamento.realizado' && current === 'pagamento_falhou') {
      return outcome(true, 'payment_retried');
    }
    return STAGE_INDEX[stage] >= STAGE_INDEX[STATUS_STAGE[current]]
      ? outcome(true, 'final')
      : outcome(false, 'late');
  }

  // SPEC §6: "An event moves a proposal only forward"; a repeat moves nothing (handlers are idempotent).
  if (RANK[to] > RANK[current]) return outcome(true, 'forward');
  return outcome(false, RANK[to] === RANK[current] ? 'same_status' : 'late');
}

/**
 * Folds {@link transition} over `events` in arrival order, starting from an unseen proposal: the
 * status it ends at (null for no events) and every transition, applied or not.
 */
export function replay(events: readonly Evento[]): {
  status: ProposalStatus | null;
  transitions: Transition[];
} {
  let status: ProposalStatus | null = null;
  const transitions: Transition[] = [];
  for (const evento of events) {
    const t = transition(status, evento);
    transitions.push(t);
    if (t.applied) status = t.to;
  }
  return { status, transitions };
}
