import type { RegistryPayloadShape } from './options';
import type { Evento } from './service-flow';

/**
 * What the service sends: the `dados` of every catalogue event and the registry result, in one
 * place for the simulator's deliveries and for `send-test-event`, so that a test event looks like
 * a real one.
 *
 * The interface shows `dados` only for `proposta.aprovada` (interface §2.5): `nu_proposta`,
 * `nu_cpf`, `st_proposta`, `vl_emprestimo`, `no_conveniada`. For the other events it says "not
 * shown" (interface §6.2), so every event carries the same fields, with the `st_proposta` the
 * event leaves the proposal at; `uuid` (interface §2.2) goes along, and the registration's
 * `requestId` (interface §2.3) on `averbacao.*` events, so a partner can tie them together.
 */

/**
 * `st_proposta` values. The interface shows two: `em_analise` for a new proposal (interface §3.1)
 * and `aprovada` (interface §2.5). It writes a status as the state the proposal is at (a past
 * participle agreeing with "proposta"), so the others are the state each event's meaning
 * (interface §6.2) leaves the proposal at, written the same way, with the stage in front where the
 * bare word would be another stage's status (`averbacao_negada`, not the analysis's `negada`).
 */
export type StProposta =
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
  | 'paga'
  | 'pagamento_falhou';

interface EventDadosRule {
  st_proposta: StProposta;
  /** Whether `dados` carries the `requestId` of the proposal's registration, when it has one. */
  requestId: boolean;
}

/** Per event: what its `dados` says beyond the proposal's own fields. */
export const EVENT_DADOS: Readonly<Record<Evento, EventDadosRule>> = {
  'proposta.criada': { st_proposta: 'em_analise', requestId: false }, // interface §3.1
  // Not shown: the credit analysis approved, the partner's simulation step comes next (interface §3.1).
  'proposta.pre_aprovada': { st_proposta: 'pre_aprovada', requestId: false },
  'proposta.aprovada': { st_proposta: 'aprovada', requestId: false }, // interface §2.5
  'proposta.negada': { st_proposta: 'negada', requestId: false }, // not shown: denied
  'proposta.cancelada': { st_proposta: 'cancelada', requestId: false }, // not shown: cancelled
  // Not shown: sent to the company, waiting for its answer.
  'averbacao.solicitada': { st_proposta: 'averbacao_solicitada', requestId: true },
  // Not shown. The margin is reserved: the proposal is registered ("averbada"). Not "aprovada",
  // which it already was before the registration started.
  'averbacao.aprovada': { st_proposta: 'averbada', requestId: true },
  // Not shown: the company denied the registration; "negada" would say the analysis denied it.
  'averbacao.negada': { st_proposta: 'averbacao_negada', requestId: true },
  'formalizacao.iniciada': { st_proposta: 'formalizacao_iniciada', requestId: false }, // link sent
  'formalizacao.concluida': { st_proposta: 'formalizada', requestId: false }, // documents signed
  'efetivacao.concluida': { st_proposta: 'efetivada', requestId: false }, // contract registered
  'pagamento.realizado': { st_proposta: 'paga', requestId: false }, // amount released
  // Not shown. "falha" names the event, not a state: the proposal is at a failed payment, still
  // owed the amount (a later `pagamento.realizado` pays it).
  'pagamento.falha': { st_proposta: 'pagamento_falhou', requestId: false },
};

/** The proposal fields every event's `dados` repeats. */
export interface ProposalFacts {
  /** A number as the service writes it; `send-test-event --proposal` may pass any text. */
  nu_proposta: number | string;
  nu_cpf: string;
  vl_emprestimo: number;
  no_conveniada: string;
  uuid: string;
}

/** The proposal `send-test-event` describes when told nothing else (a valid CPF, an invented company). */
export const EXAMPLE_PROPOSAL: Readonly<ProposalFacts> = {
  nu_proposta: 100001,
  nu_cpf: '52998224725',
  vl_emprestimo: 15000.5,
  no_conveniada: 'Empresa Exemplo Ltda',
  uuid: '3f2b8c1e-6d4a-4f0b-9a7e-2c5d8e1f4a6b',
};

/** The `dados` of `evento` for a proposal; `requestId` is its latest registration, if any. */
export function eventDados(
  evento: Evento,
  proposal: Readonly<ProposalFacts>,
  requestId: string | null,
): Record<string, unknown> {
  const rule = EVENT_DADOS[evento];
  const dados: Record<string, unknown> = {
    nu_proposta: proposal.nu_proposta,
    nu_cpf: proposal.nu_cpf,
    st_proposta: rule.st_proposta,
    vl_emprestimo: proposal.vl_emprestimo,
    no_conveniada: proposal.no_conveniada,
    uuid: proposal.uuid,
  };
  if (rule.requestId && requestId !== null) dados.requestId = requestId;
  return dados;
}

/** A delivery of interface §2.5. Its bytes change with `tentativa`, so each attempt is signed anew. */
export function eventPayload(
  evento: Evento,
  timestamp: string,
  dados: Record<string, unknown>,
  metadata: { tentativa: number; webhook_id: string },
): Record<string, unknown> {
  return { evento, timestamp, dados, metadata };
}

export interface RegistryResultFields {
  requestId: string;
  correlationId: string;
  /** `completed` or `error` when the service sends it (interface §3.2); any text from the command. */
  status: string;
  /** The proposal the registration named, when it named one. */
  nu_proposta: number | string | null;
}

/**
 * The registry-result webhook (interface §4.4), whose payload is "not shown" (interface §6.2): the
 * fields of the status query (interface §4.3) and the proposal, at the top level or under `dados`.
 */
export function registryResult(
  fields: RegistryResultFields,
  shape: RegistryPayloadShape = 'top',
): Record<string, unknown> {
  const body: Record<string, unknown> = {
    requestId: fields.requestId,
    correlationId: fields.correlationId,
    status: fields.status,
  };
  if (fields.nu_proposta !== null) body.nu_proposta = fields.nu_proposta;
  return shape === 'dados' ? { dados: body } : body;
}
