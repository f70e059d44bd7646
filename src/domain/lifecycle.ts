import { EVENT_STAGES, EVENTOS, type Evento, STAGES, type Stage } from './catalogue';

/**
 * The proposal life cycle of contract §6 as a pure state machine: what each catalogue event does to a
 * proposal, given only the status it is at. No I/O and no clock, so handlers can run it inside a
 * transaction and tests can replay any delivery order (deliveries repeat and arrive out of order).
 */

/** Every status a proposal can be at (contract §6, column "status"). */
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
/** The statuses a proposal can still move from (contract §6, not marked "(final)"). */
export type NonFinalStatus = Exclude<ProposalStatus, FinalStatus>;

/** The happy path of a proposal through the five stages (interface §1), in order. */
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

/** contract §6 table, status column: the status each catalogue event sets (its stage is the catalogue's). */
const EVENT_STATUS: Readonly<Record<Evento, ProposalStatus>> = {
  'proposta.criada': 'em_analise',
  'proposta.pre_aprovada': 'pre_aprovada',
  'proposta.aprovada': 'aprovada',
  'proposta.negada': 'negada',
  'proposta.cancelada': 'cancelada',
  'averbacao.solicitada': 'averbacao_solicitada',
  'averbacao.aprovada': 'averbada',
  'averbacao.negada': 'averbacao_negada',
  'formalizacao.iniciada': 'formalizacao_iniciada',
  'formalizacao.concluida': 'formalizada',
  'efetivacao.concluida': 'efetivada',
  'pagamento.falha': 'pagamento_falhou',
  'pagamento.realizado': 'paga',
};

/** contract §6 table, all 13 rows: the stage an event belongs to (from the catalogue) and the status it sets. */
export const EVENT_EFFECTS: Readonly<Record<Evento, { stage: Stage; status: ProposalStatus }>> =
  Object.freeze(
    Object.fromEntries(
      EVENTOS.map((evento) => [
        evento,
        Object.freeze({ stage: EVENT_STAGES[evento], status: EVENT_STATUS[evento] }),
      ]),
    ) as Record<Evento, { stage: Stage; status: ProposalStatus }>,
  );

/** The statuses marked "(final)" in contract §6: nothing moves a proposal out of them. */
export const FINAL_STATUSES: ReadonlySet<ProposalStatus> = new Set<FinalStatus>([
  'negada',
  'cancelada',
  'averbacao_negada',
  'paga',
]);

// contract §6: "Non-final statuses are ordered as listed." An event to a non-final status moves a
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

/**
 * The non-final statuses in the order of contract §6 (the order an event moves a proposal through
 * them): RANK's keys, written in that order.
 */
export const NON_FINAL_STATUSES: readonly NonFinalStatus[] = Object.freeze(
  Object.keys(RANK) as NonFinalStatus[],
);

/** Every status, in the rows' order of the contract §6 table. */
export const PROPOSAL_STATUSES: readonly ProposalStatus[] = Object.freeze(
  EVENTOS.map((evento) => EVENT_STATUS[evento]),
);

// Each status is set by exactly one event (contract §6), so its stage is that event's stage.
const STATUS_STAGE = Object.fromEntries(
  Object.values(EVENT_EFFECTS).map(({ stage, status }) => [status, stage]),
) as Readonly<Record<ProposalStatus, Stage>>;

function isFinalStatus(s: ProposalStatus): s is FinalStatus {
  return FINAL_STATUSES.has(s);
}

/** Whether `s` is final (contract §6): every later event is recorded but does not move the proposal. */
export function isFinal(s: ProposalStatus): boolean {
  return isFinalStatus(s);
}

/** The stage a status belongs to (the stage of the one event that sets it, contract §6). */
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

/** The outcome of one event on one proposal; what a handler records (`applied = 0` in contract §6). */
export interface Transition {
  evento: Evento;
  /** The status before the event; null when the proposal had not been seen. */
  from: ProposalStatus | null;
  /** The status the event sets; the proposal is at it only when `applied`, otherwise it stays at `from`. */
  to: ProposalStatus;
  /** The stage of the event (contract §6). */
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

  // contract §6: "A proposal first seen mid-way … is created at that point", even at a final status.
  if (current === null) return outcome(true, 'created');
  // contract §6: "anything after a final status … does not move it", a repeat of that final event included.
  if (isFinalStatus(current)) return outcome(false, 'after_final');

  if (isFinalStatus(to)) {
    // contract §6: "`pagamento.realizado` after `pagamento_falhou` applies (payment retried)".
    if (evento === 'pagamento.realizado' && current === 'pagamento_falhou') {
      return outcome(true, 'payment_retried');
    }
    return STAGES.indexOf(stage) >= STAGES.indexOf(STATUS_STAGE[current])
      ? outcome(true, 'final')
      : outcome(false, 'late');
  }

  // contract §6: "An event moves a proposal only forward"; a repeat moves nothing (handlers are idempotent).
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
