/** Seed §6.2: the thirteen events of the catalogue, with their stage. */
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

export function isKnownEvento(name: string): name is Evento {
  return Object.hasOwn(EVENT_STAGES, name);
}

/** Seed §3.2: statuses of a registration (averbação) request. */
export const REGISTRY_STATUSES = ['queued', 'processing', 'completed', 'error'] as const;
export type RegistryStatus = (typeof REGISTRY_STATUSES)[number];
