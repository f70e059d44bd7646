/** interface §6.2: the thirteen events of the catalogue, with their stage. */
export const EVENT_STAGES = {
  'proposta.criada': 'Proposta',
  'proposta.pre_aprovada': 'Proposta',
  'proposta.aprovada': 'Proposta',
  'proposta.negada': 'Proposta',
  'proposta.cancelada': 'Proposta',
  'averbacao.solicitada': 'Averbação',
  'averbacao.aprovada': 'Averbação',
  'averbacao.negada': 'Averbação',
  'formalizacao.iniciada': 'Formalização',
  'formalizacao.concluida': 'Formalização',
  'efetivacao.concluida': 'Efetivação',
  'pagamento.realizado': 'Pagamento',
  'pagamento.falha': 'Pagamento',
} as const;

export type Evento = keyof typeof EVENT_STAGES;
export type Stage = (typeof EVENT_STAGES)[Evento];

export const EVENTOS = Object.keys(EVENT_STAGES) as Evento[];

/**
 * The five stages in the order a proposal goes through them (interface §1). A final event applies only
 * from its own stage or an earlier one: a cancellation of the proposal stage arriving after
 * efetivação is late.
 */
export const STAGES: readonly Stage[] = ['Proposta', 'Averbação', 'Formalização', 'Efetivação', 'Pagamento'];

export function isKnownEvento(name: string): name is Evento {
  return Object.hasOwn(EVENT_STAGES, name);
}

/** interface §3.2: statuses of a registration (averbação) request. */
export const REGISTRY_STATUSES = ['queued', 'processing', 'completed', 'error'] as const;
export type RegistryStatus = (typeof REGISTRY_STATUSES)[number];
