/** The service simulator (SPEC §7): `startSimulator` and what it exposes. */
export { controlApiHelp, type Simulator, type SimulatorState, startSimulator } from './simulator';
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
export type { SentEvent, SimProposal } from './proposals';
export type { SimAverbacao } from './averbacoes';
export { HAPPY_PATH } from '../domain/lifecycle';
