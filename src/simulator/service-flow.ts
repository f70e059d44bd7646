/**
 * The service's flows as the simulator plays them, written from the interface alone and not from
 * the receiver's rules: an end-to-end test proves something only when the two sides of the wire
 * were written apart, so nothing here is imported from the receiver's domain.
 */

/** interface §6.2: the event catalogue, in the order its table lists it. */
export const EVENTOS = [
  'proposta.criada',
  'proposta.pre_aprovada',
  'proposta.aprovada',
  'proposta.negada',
  'proposta.cancelada',
  'averbacao.solicitada',
  'averbacao.aprovada',
  'averbacao.negada',
  'formalizacao.iniciada',
  'formalizacao.concluida',
  'efetivacao.concluida',
  'pagamento.realizado',
  'pagamento.falha',
] as const;

export type Evento = (typeof EVENTOS)[number];

export function isEvento(name: unknown): name is Evento {
  return typeof name === 'string' && (EVENTOS as readonly string[]).includes(name);
}

/**
 * A proposal that goes well, in order: the stages of interface §1 (Proposta, Averbação,
 * Formalização, Efetivação, Pagamento), each through its events of the interface §6.2 catalogue.
 * `proposta.pre_aprovada` comes before `proposta.aprovada`: the analysis approves, then the
 * partner's simulation step leads to the approval (interface §3.1).
 */
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

/**
 * The happy-path event after which each detour happens (`proposta.cancelada`: at any time).
 * - `proposta.negada`: interface §6.2, creating a proposal leads to `proposta.pre_aprovada` or
 *   `proposta.negada`;
 * - `averbacao.negada`: the company denies the registration it was sent (`averbacao.solicitada`);
 * - `pagamento.falha`: the payment follows the registered contract (interface §1).
 */
const DETOUR_AFTER: Readonly<Partial<Record<Evento, Evento>>> = {
  'proposta.negada': 'proposta.criada',
  'averbacao.negada': 'averbacao.solicitada',
  'pagamento.falha': 'efetivacao.concluida',
};

/**
 * After these the service sends nothing more for the proposal. A failed payment is not among
 * them: the interface §1 Pagamento stage releases the amount "or the payment fails", and the
 * service may pay on a later try.
 */
export const FINAL_EVENTS: ReadonlySet<Evento> = new Set<Evento>([
  'proposta.negada',
  'proposta.cancelada',
  'averbacao.negada',
  'pagamento.realizado',
]);

/** interface §3.2: the statuses of a registration (averbação) request, the last two final. */
export const REGISTRY_STATUSES = ['queued', 'processing', 'completed', 'error'] as const;
export type RegistryStatus = (typeof REGISTRY_STATUSES)[number];

export type AdvancePlan = { ok: true; eventos: Evento[] } | { ok: false; message: string };

/**
 * Which events take a proposal to `to` (or one step further when `to` is omitted): the rest of the
 * happy path up to it, or up to the point where a detour happens and then the detour.
 * `position` is the index in HAPPY_PATH of the furthest happy-path event sent (-1 before any).
 */
export function planAdvance(proposal: { position: number; final: boolean }, to?: string): AdvancePlan {
  if (proposal.final) return { ok: false, message: 'the proposal is at a final status' };
  const { position } = proposal;
  if (to === undefined) {
    const next = HAPPY_PATH[position + 1];
    return next === undefined
      ? { ok: false, message: 'nothing left to advance' }
      : { ok: true, eventos: [next] };
  }
  if (!isEvento(to)) return { ok: false, message: `unknown evento "${to}"` };
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
