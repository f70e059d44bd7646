import { join } from 'node:path';

import { EVENTOS, EVENT_STAGES, type Evento, type Stage } from '../../../src/domain/catalogue';
import * as Lifecycle from '../../../src/domain/lifecycle';
import {
  EVENT_EFFECTS,
  FINAL_STATUSES,
  HAPPY_PATH,
  isFinal,
  NON_FINAL_STATUSES,
  replay,
  stageOf,
  transition,
  type ProposalStatus,
  type Transition,
} from '../../../src/domain/lifecycle';
import { seededRandom } from '../../../src/domain/random';
import { loadAgainInEachTest } from './fresh-module';

// Loaded again in each test, so that Stryker runs these tests against its tables too
// (fresh-module.ts).
loadAgainInEachTest(Lifecycle, join(__dirname, '../../../src/domain/lifecycle'));

// contract §6 table, copied row by row so the module is checked against the text, not against itself.
const SPEC_TABLE: [Evento, Stage, ProposalStatus, boolean][] = [
  ['proposta.criada', 'Proposta', 'em_analise', false],
  ['proposta.pre_aprovada', 'Proposta', 'pre_aprovada', false],
  ['proposta.aprovada', 'Proposta', 'aprovada', false],
  ['proposta.negada', 'Proposta', 'negada', true],
  ['proposta.cancelada', 'Proposta', 'cancelada', true],
  ['averbacao.solicitada', 'Averbação', 'averbacao_solicitada', false],
  ['averbacao.aprovada', 'Averbação', 'averbada', false],
  ['averbacao.negada', 'Averbação', 'averbacao_negada', true],
  ['formalizacao.iniciada', 'Formalização', 'formalizacao_iniciada', false],
  ['formalizacao.concluida', 'Formalização', 'formalizada', false],
  ['efetivacao.concluida', 'Efetivação', 'efetivada', false],
  ['pagamento.falha', 'Pagamento', 'pagamento_falhou', false],
  ['pagamento.realizado', 'Pagamento', 'paga', true],
];

// contract §6: "Non-final statuses are ordered as listed", with the event that sets each.
const ORDER: [ProposalStatus, Evento][] = [
  ['em_analise', 'proposta.criada'],
  ['pre_aprovada', 'proposta.pre_aprovada'],
  ['aprovada', 'proposta.aprovada'],
  ['averbacao_solicitada', 'averbacao.solicitada'],
  ['averbada', 'averbacao.aprovada'],
  ['formalizacao_iniciada', 'formalizacao.iniciada'],
  ['formalizada', 'formalizacao.concluida'],
  ['efetivada', 'efetivacao.concluida'],
  ['pagamento_falhou', 'pagamento.falha'],
];
const NON_FINAL = ORDER.map(([status]) => status);
const FINALS: [ProposalStatus, Evento][] = [
  ['negada', 'proposta.negada'],
  ['cancelada', 'proposta.cancelada'],
  ['averbacao_negada', 'averbacao.negada'],
  ['paga', 'pagamento.realizado'],
];

const forwardPairs = ORDER.flatMap(([from], i) =>
  ORDER.slice(i + 1).map(([to, evento]) => [from, evento, to] as const),
);
const latePairs = ORDER.flatMap(([from], i) =>
  ORDER.slice(0, i).map(([to, evento]) => [from, evento, to] as const),
);

const appliedCount = (ts: readonly Transition[]) => ts.filter((t) => t.applied).length;

describe('EVENT_EFFECTS (contract §6 table)', () => {
  it.each(SPEC_TABLE)('%s → stage %s, status %s (final: %s)', (evento, stage, status, final) => {
    expect(EVENT_EFFECTS[evento]).toEqual({ stage, status });
    expect(EVENT_STAGES[evento]).toBe(stage);
    expect(isFinal(status)).toBe(final);
    expect(stageOf(status)).toBe(stage);
  });

  it('has exactly the 13 catalogue events and sets 13 distinct statuses', () => {
    expect(Object.keys(EVENT_EFFECTS).sort()).toEqual([...EVENTOS].sort());
    expect(new Set(Object.values(EVENT_EFFECTS).map((e) => e.status)).size).toBe(13);
  });

  it('NON_FINAL_STATUSES are the others, in the order contract §6 lists them', () => {
    expect(NON_FINAL_STATUSES).toEqual(ORDER.map(([status]) => status));
  });

  it('FINAL_STATUSES are the four statuses marked final', () => {
    expect([...FINAL_STATUSES].sort()).toEqual(['averbacao_negada', 'cancelada', 'negada', 'paga']);
  });
});

describe('transition', () => {
  // contract §6: a proposal first seen mid-way is created at that point, even at a final status.
  it.each(SPEC_TABLE)('creates an unseen proposal from %s', (evento, stage, status) => {
    expect(transition(null, evento)).toEqual({
      evento,
      from: null,
      to: status,
      stage,
      applied: true,
      reason: 'created',
    });
  });

  it.each(forwardPairs)('moves forward from %s on %s to %s', (from, evento, to) => {
    expect(transition(from, evento)).toEqual({
      evento,
      from,
      to,
      stage: EVENT_STAGES[evento],
      applied: true,
      reason: 'forward',
    });
  });

  it.each(latePairs)('at %s, a late %s (→ %s) is recorded, not applied', (from, evento, to) => {
    expect(transition(from, evento)).toMatchObject({ from, to, applied: false, reason: 'late' });
  });

  it.each(ORDER)('at %s, a repeat of %s is same_status', (status, evento) => {
    expect(transition(status, evento)).toMatchObject({
      from: status,
      to: status,
      applied: false,
      reason: 'same_status',
    });
  });

  // Deliveries repeat (contract §6): the same event twice is applied once.
  it.each(EVENTOS)('applies %s only once when delivered twice', (evento) => {
    const { status, transitions } = replay([evento, evento]);
    expect(status).toBe(EVENT_EFFECTS[evento].status);
    expect(transitions.map((t) => t.applied)).toEqual([true, false]);
    expect(transitions[1]?.reason).toBe(
      isFinal(EVENT_EFFECTS[evento].status) ? 'after_final' : 'same_status',
    );
  });

  // contract §6: "anything after a final status … does not move it" — every event, the final one included.
  const afterFinal = FINALS.flatMap(([status]) => EVENTOS.map((evento) => [status, evento] as const));
  it.each(afterFinal)('at final %s, %s is after_final', (status, evento) => {
    expect(transition(status, evento)).toEqual({
      evento,
      from: status,
      to: EVENT_EFFECTS[evento].status,
      stage: EVENT_EFFECTS[evento].stage,
      applied: false,
      reason: 'after_final',
    });
  });

  // A final event applies only from its own stage or an earlier one; from a later stage it is late.
  it.each<[ProposalStatus, Evento, boolean]>([
    ['em_analise', 'proposta.negada', true],
    ['pre_aprovada', 'proposta.negada', true],
    ['aprovada', 'proposta.negada', true],
    ['averbacao_solicitada', 'proposta.negada', false],
    ['em_analise', 'proposta.cancelada', true],
    ['aprovada', 'proposta.cancelada', true],
    ['averbada', 'proposta.cancelada', false],
    ['efetivada', 'proposta.cancelada', false],
    ['pagamento_falhou', 'proposta.cancelada', false],
    ['aprovada', 'averbacao.negada', true],
    ['averbacao_solicitada', 'averbacao.negada', true],
    ['averbada', 'averbacao.negada', true],
    ['formalizacao_iniciada', 'averbacao.negada', false],
    ['efetivada', 'averbacao.negada', false],
  ])('at %s, %s applied: %s', (from, evento, applied) => {
    expect(transition(from, evento)).toMatchObject({
      from,
      to: EVENT_EFFECTS[evento].status,
      applied,
      reason: applied ? 'final' : 'late',
    });
  });

  it.each(NON_FINAL.filter((s) => s !== 'pagamento_falhou'))(
    'at %s, pagamento.realizado is final',
    (from) => {
      expect(transition(from, 'pagamento.realizado')).toMatchObject({
        from,
        to: 'paga',
        applied: true,
        reason: 'final',
      });
    },
  );

  it('applies pagamento.realizado after pagamento_falhou as a retried payment (contract §6)', () => {
    expect(transition('pagamento_falhou', 'pagamento.realizado')).toEqual({
      evento: 'pagamento.realizado',
      from: 'pagamento_falhou',
      to: 'paga',
      stage: 'Pagamento',
      applied: true,
      reason: 'payment_retried',
    });
  });

  it('does not apply pagamento.falha after paga', () => {
    expect(transition('paga', 'pagamento.falha')).toMatchObject({
      to: 'pagamento_falhou',
      applied: false,
      reason: 'after_final',
    });
  });
});

describe('replay', () => {
  // paga is reachable from every non-final status, so it ranks after all of them here.
  const RANK = new Map<ProposalStatus, number>([...NON_FINAL, 'paga' as const].map((s, i) => [s, i]));
  const rank = (s: ProposalStatus): number => {
    const r = RANK.get(s);
    if (r === undefined) throw new Error(`no rank for ${s}`);
    return r;
  };

  it('starts unseen', () => {
    expect(replay([])).toEqual({ status: null, transitions: [] });
  });

  it('walks the happy path in order', () => {
    const { status, transitions } = replay(HAPPY_PATH);
    expect(status).toBe('paga');
    expect(transitions.map((t) => t.reason)).toEqual([
      'created',
      ...Array<string>(HAPPY_PATH.length - 2).fill('forward'),
      'final',
    ]);
  });

  it('retries a failed payment: falha, falha again, then realizado', () => {
    const { status, transitions } = replay([
      'efetivacao.concluida',
      'pagamento.falha',
      'pagamento.falha',
      'pagamento.realizado',
      'pagamento.falha',
    ]);
    expect(status).toBe('paga');
    expect(transitions.map((t) => t.reason)).toEqual([
      'created',
      'forward',
      'same_status',
      'payment_retried',
      'after_final',
    ]);
  });

  // A seeded generator, so a failure is reproducible from the seed in its name.
  const prng = seededRandom;

  function shuffledWithDuplicates(seed: number): Evento[] {
    const rand = prng(seed);
    const pick = (n: number) => Math.floor(rand() * n);
    const events = [...HAPPY_PATH];
    for (let i = events.length - 1; i > 0; i--) {
      const j = pick(i + 1);
      [events[i], events[j]] = [events[j] as Evento, events[i] as Evento];
    }
    // Redeliveries: up to 5 copies of events already in the sequence, inserted anywhere after the original.
    for (let k = pick(6); k > 0; k--) {
      const from = pick(events.length);
      const at = from + 1 + pick(events.length - from);
      events.splice(at, 0, events[from] as Evento);
    }
    return events;
  }

  // One test per property over all seeds; each check carries its seed so a failure names the order to replay.
  const SEEDS = Array.from({ length: 500 }, (_, i) => i + 1);

  it('any order of the happy path, with repeats, ends at paga (500 seeded shuffles)', () => {
    for (const seed of SEEDS) {
      const events = shuffledWithDuplicates(seed);
      const { status, transitions } = replay(events);
      const applied = transitions.filter((t) => t.applied);
      const ranks = applied.map((t) => rank(t.to));
      let current: ProposalStatus | null = null;
      let chained = true;
      for (const t of transitions) {
        // Each transition starts where the previous applied one left the proposal.
        chained &&= t.from === current;
        if (t.applied) current = t.to;
      }
      expect({
        seed,
        status,
        firstReason: transitions[0]?.reason,
        lastApplied: applied.at(-1)?.evento,
        // No event is applied twice: applied transitions and distinct applied events coincide.
        distinctApplied: new Set(applied.map((t) => t.evento)).size,
        // Applied statuses move strictly forward in rank.
        strictlyIncreasing: ranks.every((r, i) => i === 0 || r > (ranks[i - 1] as number)),
        chained,
      }).toEqual({
        seed,
        status: 'paga',
        firstReason: 'created',
        lastApplied: 'pagamento.realizado',
        distinctApplied: applied.length,
        strictlyIncreasing: true,
        chained: true,
      });
    }
  });

  it('random events of the whole catalogue never leave a final status (200 seeded sequences)', () => {
    for (const seed of SEEDS.slice(0, 200)) {
      const rand = prng(seed * 7919);
      const events = Array.from({ length: 12 }, () => EVENTOS[Math.floor(rand() * EVENTOS.length)] as Evento);
      const { status, transitions } = replay(events);
      const firstFinal = transitions.findIndex((t) => t.applied && isFinal(t.to));
      const end = firstFinal >= 0 ? transitions[firstFinal]?.to : status;
      expect({
        seed,
        status,
        afterFinalOnly: transitions
          .slice(firstFinal + 1)
          .every((t) => firstFinal < 0 || t.reason === 'after_final'),
        applied: appliedCount(transitions) >= 1,
      }).toEqual({ seed, status: end, afterFinalOnly: true, applied: true });
    }
  });
});
