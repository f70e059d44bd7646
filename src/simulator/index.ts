/** The service simulator (contract §7): `startSimulator` and what it exposes. */
export { type Simulator, startSimulator } from './simulator';
export { controlApiHelp } from './control-routes';
export type { SimulatorState } from './core';
export {
  type ChaosOptions,
  type DeliveryOptions,
  type RegistryOptions,
  type RegistryOutcome,
  type RegistryPayloadShape,
  type RegistryWebhookMode,
  seededRandom,
  type SimulatorOptions,
} from './options';
export type { AttemptRecord, DeliveryRecord, Registration } from './deliverer';
export type { SentEvent, SimProposal } from './service-proposals';
export type { SimAverbacao } from './service-averbacoes';
export { EVENTOS, type Evento, HAPPY_PATH, isEvento } from './service-flow';
export { isoBrasilia } from './brasilia-time';
export { eventDados, eventPayload, EXAMPLE_PROPOSAL, registryResult } from './event-examples';
export { signatureOf } from './signing';
