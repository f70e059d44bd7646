import type { AverbacaoAccepted, ServiceClient } from '../../client';
import type { Simulator } from '../../simulator';
import type { Store } from '../../sqlite/store';

/**
 * The moves a demo scenario makes: asks the simulator (the service's side) to act, then waits
 * until the receiver's own database shows the effect. Nothing is asserted here: the summary
 * compares where each proposal ended with where its scenario expected it.
 */

export interface DemoDriverOptions {
  simulator: Simulator;
  client: ServiceClient;
  /** The receiver's database: what the demo watches. */
  store: Store;
  /** Tracks an averbação the demo started (service-commands.ts `trackStarted`). */
  track(accepted: AverbacaoAccepted, nu: number): Promise<unknown>;
  /** How long any one wait may last before the demo gives up. */
  timeoutMs: number;
  /** Named in a timeout's message: where to look for why. */
  logPath: string;
  /** Prints a line of progress. */
  say: (text: string) => void;
}

const POLL_MS = 50;

export class DemoDriver {
  readonly simulator: Simulator;
  // Averbações start one at a time, so that the simulator's registry mode (send/drop) set for one
  // proposal's request applies to that request only.
  private averbacaoLock: Promise<unknown> = Promise.resolve();

  constructor(private readonly options: DemoDriverOptions) {
    this.simulator = options.simulator;
  }

  say(text: string): void {
    this.options.say(text);
  }

  statusOf(nu: number): string | undefined {
    return this.options.store.proposals.get(nu)?.status;
  }

  async waitFor(what: string, predicate: () => boolean): Promise<void> {
    const until = Date.now() + this.options.timeoutMs;
    while (!predicate()) {
      if (Date.now() > until) {
        throw new Error(`demo: timed out waiting for ${what} (see ${this.options.logPath})`);
      }
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  }

  waitForStatus(nu: number, status: string): Promise<void> {
    return this.waitFor(`proposal ${nu} ${status}`, () => this.statusOf(nu) === status);
  }

  /** Creates a proposal through the service client, as a partner would; answers its nu_proposta. */
  async createProposal(amount: number, cpf: string): Promise<number> {
    const created = await this.options.client.createProposal({
      nu_cpf: cpf,
      nu_cnpj_conveniada: '12.ABC.345/01DE-35',
      vl_emprestimo: amount,
      qt_parcela: 48,
      dados_bancarios: { pix: 'cliente@exemplo.com.br' },
    });
    return Number(created.nu_proposta);
  }

  /** Waits for the result of the credit analysis that follows every creation. */
  waitForAnalysis(nu: number): Promise<void> {
    return this.waitFor(`proposal ${nu} analysed`, () =>
      ['pre_aprovada', 'negada'].includes(this.statusOf(nu) ?? ''),
    );
  }

  /** Has the simulator send the events up to `to`, and waits for the proposal to reach `status`. */
  async advance(nu: number, to: string, status: string): Promise<void> {
    const sent = this.simulator.advance(nu, to);
    if (!sent.ok) throw new Error(`demo: simulator could not advance ${nu} to ${to}: ${sent.message}`);
    await this.waitForStatus(nu, status);
  }

  /**
   * Starts an averbação through the service client, as a partner would, and tracks it in the
   * receiver's database. `webhook: 'drop'` makes the simulator lose its result webhook, so that
   * only the receiver's poller can learn the result. Answers the requestId.
   */
  async startAverbacao(
    nu: number,
    body: Record<string, unknown> = {},
    webhook: 'send' | 'drop' = 'send',
  ): Promise<string> {
    const accepted = await this.oneAtATime(async () => {
      this.simulator.setRegistry({ webhook });
      try {
        return await this.options.client.startAverbacao({ nu_proposta: nu, ...body });
      } finally {
        this.simulator.setRegistry({ webhook: 'send' });
      }
    });
    await this.options.track(accepted, nu);
    return accepted.requestId;
  }

  /** Waits until the receiver knows the averbação's final status (by webhook or by polling). */
  averbacaoDone(requestId: string): Promise<void> {
    return this.waitFor(`averbação ${requestId}`, () => {
      const a = this.options.store.averbacoes.get(requestId);
      return a !== undefined && (a.status === 'completed' || a.status === 'error');
    });
  }

  private oneAtATime(start: () => Promise<AverbacaoAccepted>): Promise<AverbacaoAccepted> {
    const run = this.averbacaoLock.then(start, start);
    this.averbacaoLock = run.catch(() => undefined);
    return run;
  }
}
