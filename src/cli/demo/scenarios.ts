import type { DemoDriver } from './driver';
import type { ProgressWatch } from './progress';

/**
 * The paths the demo drives proposals down, each with where it must end. Together they show the
 * receiver's life cycle, the registry webhook and its polling fallback, and out-of-order deliveries.
 */

export interface Scenario {
  label: string;
  /** Where the proposal must end, and its averbação with it when the scenario starts one. */
  expect: { status: string; averbacao?: { status: string; source: 'webhook' | 'poll' } };
  /** Loan amount. @default {@link DEFAULT_AMOUNT} */
  amount?: number;
  /** The worker's CPF: the demo has two people, so that erasing one leaves the other. @default {@link DEMO_PEOPLE}[0] */
  cpf?: string;
  /** Runs once the proposal has been analysed (pre_aprovada or negada). */
  run: (demo: DemoDriver, nu: number) => Promise<void>;
}

export const DEFAULT_AMOUNT = 15_000.5;

/** The demo's two workers (valid CPFs, made up): `subject erase` one, the other stays whole. */
export const DEMO_PEOPLE = ['52998224725', '16899535009'] as const;

export const SCENARIOS: readonly Scenario[] = [
  {
    label: 'paid',
    expect: { status: 'paga', averbacao: { status: 'completed', source: 'webhook' } },
    run: async (demo, nu) => {
      await demo.advance(nu, 'proposta.aprovada', 'aprovada');
      await demo.averbacaoDone(await demo.startAverbacao(nu));
      await demo.advance(nu, 'pagamento.realizado', 'paga');
    },
  },
  {
    label: 'denied by credit analysis',
    cpf: DEMO_PEOPLE[1],
    // Above the simulator's denyAboveAmount (200 000 by default): its analysis denies it.
    amount: 250_000,
    expect: { status: 'negada' },
    run: (demo, nu) => demo.waitForStatus(nu, 'negada'),
  },
  {
    label: 'averbação denied by the company',
    expect: { status: 'averbacao_negada', averbacao: { status: 'error', source: 'webhook' } },
    run: async (demo, nu) => {
      await demo.advance(nu, 'proposta.aprovada', 'aprovada');
      await demo.averbacaoDone(await demo.startAverbacao(nu, { forceError: true }));
      await demo.waitForStatus(nu, 'averbacao_negada');
    },
  },
  {
    label: 'registry webhook lost, resolved by polling',
    cpf: DEMO_PEOPLE[1],
    expect: { status: 'paga', averbacao: { status: 'completed', source: 'poll' } },
    run: async (demo, nu) => {
      await demo.advance(nu, 'proposta.aprovada', 'aprovada');
      const requestId = await demo.startAverbacao(nu, {}, 'drop');
      await demo.averbacaoDone(requestId);
      demo.say(
        `  ${nu}: registry webhook never came; GET /request/${requestId.slice(0, 8)}… answered completed`,
      );
      await demo.advance(nu, 'pagamento.realizado', 'paga');
    },
  },
  {
    label: 'payment failed, then paid; out-of-order deliveries',
    expect: { status: 'paga', averbacao: { status: 'completed', source: 'webhook' } },
    run: async (demo, nu) => {
      await demo.advance(nu, 'proposta.aprovada', 'aprovada');
      await demo.averbacaoDone(await demo.startAverbacao(nu));
      demo.simulator.setChaos({ outOfOrder: true });
      await demo.advance(nu, 'pagamento.falha', 'pagamento_falhou');
      demo.simulator.setChaos({ outOfOrder: false });
      await demo.simulator.sendEvent(nu, 'pagamento.realizado');
      await demo.waitForStatus(nu, 'paga');
    },
  },
];

export interface DrivenProposal {
  nu: number;
  scenario: Scenario;
}

/**
 * Creates one proposal per scenario, one after the other (so that their numbers follow the list),
 * then drives them all at once, as a partner's traffic would interleave.
 */
export async function driveScenarios(
  demo: DemoDriver,
  progress: ProgressWatch,
  scenarios: readonly Scenario[] = SCENARIOS,
): Promise<DrivenProposal[]> {
  const driven: DrivenProposal[] = [];
  for (const scenario of scenarios) {
    const nu = await demo.createProposal(scenario.amount ?? DEFAULT_AMOUNT, scenario.cpf ?? DEMO_PEOPLE[0]);
    progress.follow(nu, scenario.label);
    driven.push({ nu, scenario });
    demo.say(`created proposal ${nu}: ${scenario.label}`);
  }
  await Promise.all(
    driven.map(async ({ nu, scenario }) => {
      await demo.waitForAnalysis(nu);
      await scenario.run(demo, nu);
    }),
  );
  return driven;
}
