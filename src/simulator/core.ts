import type { ServerResponse } from 'node:http';
import { AverbacaoBook, type SimAverbacao } from './service-averbacoes';
import { type AttemptRecord, Deliverer, type DeliveryRecord, type Registration } from './deliverer';
import type { ResolvedChaos, ResolvedOptions } from './options';
import { ProposalBook, type SimProposal } from './service-proposals';
import { type AdvancePlan, type Evento, planAdvance, type RegistryStatus } from './service-flow';
import { type RegistrySettings, Settings } from './settings';
import { Timers } from './timers';
import { TokenBook } from './tokens';

/** Everything the simulator did, as `GET /_sim/state` and `Simulator.state()` show it. */
export interface SimulatorState {
  registrations: Omit<Registration, 'secret'>[];
  proposals: SimProposal[];
  averbacoes: (SimAverbacao & { status: RegistryStatus })[];
  deliveries: DeliveryRecord[];
  attempts: AttemptRecord[];
  chaos: ResolvedChaos;
  registry: RegistrySettings;
  /** `GET /result/:id` requests being held open right now (clients caught by interface §4.2's trap). */
  heldResultRequests: number;
}

/**
 * The service's state and the parts that act on it, built once per simulator: what the service
 * routes, the control API and the `Simulator` handle share.
 */
export class SimulatorCore {
  readonly timers = new Timers();
  readonly settings: Settings;
  readonly tokens: TokenBook;
  readonly deliverer: Deliverer;
  readonly proposals: ProposalBook;
  readonly averbacoes: AverbacaoBook;
  /** `GET /result/:id` requests, held open until the client leaves or the simulator closes. */
  readonly held = new Set<ServerResponse>();

  constructor(readonly opts: ResolvedOptions) {
    const { clock, logger } = opts;
    const { timers } = this;
    const settings = new Settings(opts.chaos, opts.registry, logger);
    const chaos = () => settings.chaos;
    this.settings = settings;
    this.tokens = new TokenBook(clock, opts.tokenTtlSeconds);
    this.deliverer = new Deliverer({
      delivery: opts.delivery,
      signatureHeader: opts.signatureHeader,
      chaos,
      random: opts.random,
      clock,
      logger,
      timers,
    });
    this.proposals = new ProposalBook({ deliverer: this.deliverer, chaos, clock, logger, timers });
    this.averbacoes = new AverbacaoBook({
      deliverer: this.deliverer,
      proposals: this.proposals,
      registry: () => settings.registry,
      clock,
      logger,
      timers,
    });
  }

  /** A deep copy, so that callers can keep it while the simulator goes on. */
  state(): SimulatorState {
    return structuredClone({
      registrations: [...this.deliverer.registrations.values()].map(({ secret: _secret, ...r }) => r),
      proposals: this.proposals.all(),
      averbacoes: this.averbacoes.all(),
      deliveries: this.deliverer.deliveries,
      attempts: this.deliverer.attempts,
      chaos: this.settings.chaos,
      registry: this.settings.registryShown(),
      heldResultRequests: this.held.size,
    });
  }

  /** Sends the events that take proposal `nu` to `to` (one step when omitted), or says why not. */
  advance(nu: number, to?: string): AdvancePlan {
    const proposal = this.proposals.get(nu);
    if (proposal === undefined) return { ok: false, message: `unknown proposal ${nu}` };
    const plan = planAdvance(proposal, to);
    if (plan.ok) for (const evento of plan.eventos) void this.proposals.emit(nu, evento);
    return plan;
  }

  /** Sends `evento` for proposal `nu` as is, whatever its status; throws for an unknown proposal. */
  sendEvent(nu: number, evento: Evento): Promise<void> {
    if (this.proposals.get(nu) === undefined) throw new Error(`unknown proposal ${nu}`);
    return this.proposals.emit(nu, evento);
  }

  /** A deactivated callback receives again; false for an unknown registration. */
  reactivate(registrationId: string): boolean {
    return this.deliverer.reactivate(registrationId) !== undefined;
  }
}
