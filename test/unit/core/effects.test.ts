import {
  type EffectProgram,
  type EffectsEnv,
  proposalKey,
  stageEffects,
  startTracking,
} from '../../../src/core/effects';
import type { EventFacts } from '../../../src/domain/event-effects';
import type { BuiltInStage } from '../../../src/domain/handler-order';
import { type Dialect, postgresDialect, sqliteDialect } from '../../../src/domain/sql/dialect';
import { eventFacts } from '../../helpers/events';

/**
 * The built-in effects' programs (core/effects.ts), driven here as each store's driver drives them:
 * the statements each asks for, in order, given the rows its store would answer. Both stores run
 * the same programs against real databases in test/integration/store-conformance and the
 * mode-equality tests; this table names the statements and their order per dialect.
 */

/** `proposta.criada` of proposal 4242 unless `over` says otherwise. */
const facts = (over: Partial<EventFacts>): EventFacts =>
  eventFacts({ evento: 'proposta.criada', nuProposta: 4242, ...over });

/** Runs `program`, answering each statement with `answers[name]` (default: no rows). */
function drive<R>(
  program: EffectProgram<R>,
  answers: Record<string, unknown[]> = {},
): { steps: string[]; params: unknown[][]; result: R } {
  const steps: string[] = [];
  const params: unknown[][] = [];
  let step = program.next([]);
  while (step.done !== true) {
    const s = step.value;
    if ('statement' in s) {
      const name = s.statement.name.replace('consig_effects_', '');
      steps.push(name);
      params.push([...s.params]);
      step = program.next(answers[name] ?? []);
    } else {
      steps.push(`first poll ${s.firstPoll.requestId} at ${s.firstPoll.at.toISOString()}`);
      step = program.next([]);
    }
  }
  return { steps, params, result: step.value };
}

const NOW = new Date('2026-11-26T12:00:00.000Z');
const warnings: string[] = [];
const DIALECTS = { sqlite: sqliteDialect, postgres: postgresDialect };
const env = (dialect: Dialect['name'], over: Partial<EffectsEnv> = {}): EffectsEnv => ({
  dialect: DIALECTS[dialect],
  now: NOW,
  logger: { info: () => undefined, warn: (_f, m) => void warnings.push(m) },
  schedule: { graceMs: 60_000, intervalMs: 30_000, maxIntervalMs: 600_000, maxAgeMs: 86_400_000 },
  ...over,
});

describe('the life cycle', () => {
  it.each<[string, Dialect['name'], Partial<EffectsEnv>, Record<string, unknown[]>, string[]]>([
    [
      'SQLite, a new proposal',
      'sqlite',
      {},
      { record: [{ id: 1 }] },
      ['proposal_status', 'record', 'create'],
    ],
    [
      'SQLite, a known proposal',
      'sqlite',
      {},
      { proposal_status: [{ status: 'em_analise' }], record: [{ id: 1 }] },
      ['proposal_status', 'record', 'move'],
    ],
    [
      'SQLite, an event recorded before (a replay): nothing else is written',
      'sqlite',
      {},
      { proposal_status: [{ status: 'em_analise' }] },
      ['proposal_status', 'record'],
    ],
    ['PostgreSQL, a new proposal: one statement', 'postgres', {}, {}, ['proposal_status', 'pg_create']],
    [
      'PostgreSQL, a known proposal: one statement',
      'postgres',
      {},
      { proposal_status: [{ status: 'em_analise' }] },
      ['proposal_status', 'pg_move'],
    ],
    [
      'PostgreSQL, the status already locked for the batch: no read',
      'postgres',
      { statuses: new Map([['4242', 'em_analise' as const]]) },
      {},
      ['pg_move'],
    ],
  ])('%s', (_name, dialect, over, answers, expected) => {
    expect(drive(stageEffects('lifecycle', facts({}), env(dialect, over)), answers).steps).toEqual(expected);
  });

  it('keeps nu_proposta a number on SQLite (INTEGER affinity, integers sort first) and text on PostgreSQL', () => {
    expect(drive(stageEffects('lifecycle', facts({}), env('sqlite'))).params[0]).toEqual([4242]);
    expect(drive(stageEffects('lifecycle', facts({}), env('postgres'))).params[0]).toEqual(['4242']);
    expect(proposalKey(facts({}))).toBe('4242');
  });

  it.each<[string, Record<string, unknown[]>, string]>([
    ['recorded and applied: the new status', { pg_move: [{ recorded: true }] }, 'aprovada'],
    ['recorded before (a replay): the status it had', {}, 'em_analise'],
  ])('keeps the batch statuses up to date: %s', (_name, answers, status) => {
    const statuses = new Map([['4242', 'em_analise' as const]]);
    drive(
      stageEffects('lifecycle', facts({ evento: 'proposta.aprovada' }), env('postgres', { statuses })),
      answers,
    );
    expect(statuses.get('4242')).toBe(status);
  });

  it('writes nothing for an event that moves no proposal, and warns when it should have', () => {
    warnings.length = 0;
    expect(
      drive(stageEffects('lifecycle', facts({ kind: 'registry', evento: null }), env('sqlite'))).steps,
    ).toEqual([]);
    expect(drive(stageEffects('lifecycle', facts({ nuProposta: null }), env('sqlite'))).steps).toEqual([]);
    expect(warnings).toEqual(['life-cycle event without nu_proposta: nothing to move']);
  });
});

describe('registry tracking and results', () => {
  const withRequest = facts({ requestId: 'req-1' });
  const result = facts({ kind: 'registry', evento: null, requestId: 'req-1', registryStatus: 'completed' });

  it.each<[string, BuiltInStage, EventFacts, Dialect['name'], Record<string, unknown[]>, string[]]>([
    [
      'a new registration on PostgreSQL: its row, then its first poll queued with it',
      'registry_tracking',
      withRequest,
      'postgres',
      { track: [{ request_id: 'req-1' }] },
      ['track', 'first poll req-1 at 2026-11-26T12:01:00.000Z'],
    ],
    [
      'a registration tracked already: filled in, no poll',
      'registry_tracking',
      withRequest,
      'sqlite',
      {},
      ['track', 'fill'],
    ],
    ['an event with no requestId: nothing', 'registry_tracking', facts({}), 'sqlite', {}, []],
    [
      'a final result for a tracked registration',
      'registry_results',
      result,
      'sqlite',
      { averbacao_state: [{ status: 'processing', correlation_id: null, nu_proposta: 4242 }] },
      ['averbacao_state', 'set_final'],
    ],
  ])('%s', (_name, stage, event, dialect, answers, expected) => {
    expect(drive(stageEffects(stage, event, env(dialect)), answers).steps).toEqual(expected);
  });

  it('answers whether the registration was new', () => {
    const effect = {
      type: 'track' as const,
      requestId: 'req-2',
      correlationId: null,
      nuProposta: null,
      status: 'queued' as const,
      via: 'declared' as const,
      nextPollAt: null,
    };
    expect(drive(startTracking(effect, sqliteDialect, NOW.toISOString()), { track: [{}] }).result).toBe(true);
    expect(drive(startTracking(effect, sqliteDialect, NOW.toISOString())).result).toBe(false);
  });
});
