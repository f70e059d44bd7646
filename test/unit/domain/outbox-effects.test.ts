import { join } from 'node:path';

import type { ProcessedEvent } from '../../../src/domain/forwarding/messages';
import { type Dialect, postgresDialect, sqliteDialect } from '../../../src/domain/sql/dialect';
import * as OutboxEffects from '../../../src/domain/sql/outbox-effects';
import { loadAgainInEachTest } from './fresh-module';

/**
 * The outbox's read-back mapped into the pure rules' types (domain/sql/outbox-effects.ts). Its
 * statement runs against both databases in test/integration/store-conformance.test.ts; here each
 * value is put in the column the statement selects it in (its SELECT list, read from the text), as
 * each store's driver hands it over, and the mapping must find it there. Loaded again in each test,
 * so that Stryker runs these tests against the column tables too (fresh-module.ts).
 */
loadAgainInEachTest(OutboxEffects, join(__dirname, '../../../src/domain/sql/outbox-effects'));

/** The SELECT list of OUTBOX_EFFECTS: `t.to_status`, `p.uuid`, …, then the `finished` CASE. */
function selectList(): string[] {
  const text = OutboxEffects.OUTBOX_EFFECTS;
  return text.slice('SELECT '.length, text.indexOf('\nFROM ')).split(', ');
}
const FINISHED = 'CASE WHEN ra.result_event_id = e.event_id THEN 1 ELSE 0 END';

/** A row: each value at its expression's place (`finished` for the CASE), null elsewhere. */
function rowOf(values: Record<string, unknown>): unknown[] {
  const list = selectList();
  const row = list.map(() => null as unknown);
  for (const [name, value] of Object.entries(values)) {
    const at = list.indexOf(name === 'finished' ? FINISHED : name);
    if (at === -1) throw new Error(`OUTBOX_EFFECTS selects no ${name}`);
    row[at] = value;
  }
  return row;
}

/** Every column of an averbação under `alias`, as `store` hands them over. */
function averbacaoColumns(alias: string, store: 'sqlite' | 'postgres', completed: boolean, nu: unknown) {
  const pg = store === 'postgres';
  return {
    [`${alias}.request_id`]: `req-${alias}`,
    [`${alias}.correlation_id`]: `corr-${alias}`,
    [`${alias}.nu_proposta`]: nu,
    [`${alias}.status`]: completed ? 'completed' : 'processing',
    [`${alias}.result_source`]: completed ? 'webhook' : null,
    [`${alias}.stale`]: pg ? true : 1,
    [`${alias}.result_body`]: completed ? '{"ok":true}' : null,
    [`${alias}.completed_at`]: completed
      ? pg
        ? new Date('2026-03-02T10:00:00.000Z')
        : '2026-03-02T10:00:00.000Z'
      : null,
    [`${alias}.updated_at`]: pg ? new Date('2026-03-02T11:00:00.000Z') : '2026-03-02T11:00:00.000Z',
  };
}

function averbacao(alias: string, completed: boolean, nu: number | string | null) {
  return {
    request_id: `req-${alias}`,
    correlation_id: `corr-${alias}`,
    nu_proposta: nu,
    status: completed ? 'completed' : 'processing',
    result_source: completed ? 'webhook' : null,
    stale: 1,
    result_body: completed ? '{"ok":true}' : null,
    completed_at: completed ? '2026-03-02T10:00:00.000Z' : null,
    updated_at: '2026-03-02T11:00:00.000Z',
  };
}

const lifeCycleEvent: ProcessedEvent = {
  id: 41,
  kind: 'event',
  evento: 'proposta.aprovada',
  nu_proposta: 123,
  request_id: null,
  dedup_key: 'dk-41',
  received_at: '2026-03-02T09:00:00.000Z',
  payload: {},
};
const registryResult: ProcessedEvent = {
  ...lifeCycleEvent,
  id: 42,
  kind: 'registry',
  evento: null,
  nu_proposta: null,
  request_id: 'req-ra',
};

const STORES: [string, Dialect][] = [
  ['sqlite', sqliteDialect],
  ['postgres', postgresDialect],
];

describe('effectsParams', () => {
  it.each([
    ['a life-cycle event binds no registration', lifeCycleEvent, [41, null]],
    [
      'a life-cycle event binds none even when it names one',
      { ...lifeCycleEvent, request_id: 'req-x' },
      [41, null],
    ],
    ['a registry result binds its request id', registryResult, [42, 'req-ra']],
    ['a poll answer binds its request id', { ...registryResult, kind: 'poll' as const }, [42, 'req-ra']],
  ])('%s', (_name, event, params) => {
    expect(OutboxEffects.effectsParams(event)).toEqual(params);
  });
});

describe.each(STORES)('effectsFrom on %s', (store, dialect) => {
  const pg = store === 'postgres';

  it('a life-cycle event: its transition, the proposal after it, and the latest averbação', () => {
    const row = rowOf({
      't.from_status': 'pre_aprovada',
      't.to_status': 'aprovada',
      't.applied': pg ? true : 1,
      't.reason': 'forward',
      'p.nu_proposta': pg ? '123' : 123,
      'p.uuid': 'uuid-1',
      'p.nu_cpf': '123.***.***-09',
      'p.nu_cnpj_conveniada': '12345678000195',
      'p.vl_emprestimo': pg ? '1500.50' : 1500.5,
      'p.no_conveniada': 'Conveniada',
      'p.stage': 'Proposta',
      'p.status': 'aprovada',
      'p.last_evento': 'proposta.aprovada',
      'p.created_at': pg ? new Date('2026-03-01T08:00:00.000Z') : '2026-03-01T08:00:00.000Z',
      'p.updated_at': pg ? new Date('2026-03-02T09:00:00.000Z') : '2026-03-02T09:00:00.000Z',
      ...averbacaoColumns('pa', store as 'sqlite' | 'postgres', false, pg ? '123' : 123),
      finished: 0,
    });
    expect(OutboxEffects.effectsFrom(dialect, lifeCycleEvent, row)).toEqual({
      event: lifeCycleEvent,
      transition: { from_status: 'pre_aprovada', to_status: 'aprovada', applied: true, reason: 'forward' },
      proposal: {
        nu_proposta: 123,
        uuid: 'uuid-1',
        nu_cpf: '123.***.***-09',
        nu_cnpj_conveniada: '12345678000195',
        vl_emprestimo: 1500.5,
        no_conveniada: 'Conveniada',
        stage: 'Proposta',
        status: 'aprovada',
        last_evento: 'proposta.aprovada',
        created_at: '2026-03-01T08:00:00.000Z',
        updated_at: '2026-03-02T09:00:00.000Z',
      },
      proposalAverbacao: averbacao('pa', false, 123),
      finishedAverbacao: null,
    });
  });

  it('an event the life cycle did not apply, on a proposal without averbação', () => {
    const row = rowOf({
      't.from_status': null,
      't.to_status': 'paga',
      't.applied': pg ? false : 0,
      't.reason': 'after_final',
      'p.nu_proposta': 'ABC-7',
      'p.vl_emprestimo': null,
      'p.stage': 'Pagamento',
      'p.status': 'paga',
      'p.created_at': pg ? new Date('2026-03-01T08:00:00.000Z') : '2026-03-01T08:00:00.000Z',
      'p.updated_at': pg ? new Date('2026-03-01T08:00:00.000Z') : '2026-03-01T08:00:00.000Z',
    });
    const effects = OutboxEffects.effectsFrom(dialect, { ...lifeCycleEvent, nu_proposta: 'ABC-7' }, row);
    expect(effects.transition).toEqual({
      from_status: null,
      to_status: 'paga',
      applied: false,
      reason: 'after_final',
    });
    expect(effects.proposal).toMatchObject({
      nu_proposta: 'ABC-7',
      uuid: null,
      vl_emprestimo: null,
      last_evento: null,
    });
    expect(effects.proposalAverbacao).toBeNull();
    expect(effects.finishedAverbacao).toBeNull();
  });

  it('a transition whose proposal row is missing shows no proposal', () => {
    const row = rowOf({ 't.to_status': 'aprovada', 't.applied': pg ? true : 1, 't.reason': 'forward' });
    const effects = OutboxEffects.effectsFrom(dialect, lifeCycleEvent, row);
    expect(effects.transition).not.toBeNull();
    expect(effects.proposal).toBeNull();
    expect(effects.proposalAverbacao).toBeNull();
  });

  it('a registry result without its proposal: the tracked registration names it, and the result finished it', () => {
    const row = rowOf({
      ...averbacaoColumns('ra', store as 'sqlite' | 'postgres', true, pg ? '456' : 456),
      finished: 1,
    });
    expect(OutboxEffects.effectsFrom(dialect, registryResult, row)).toEqual({
      event: { ...registryResult, nu_proposta: 456 },
      transition: null,
      proposal: null,
      proposalAverbacao: null,
      finishedAverbacao: averbacao('ra', true, 456),
    });
  });

  it('a registration tracked without a proposal leaves the event without one; an unfinished one is no result', () => {
    const row = rowOf({
      ...averbacaoColumns('ra', store as 'sqlite' | 'postgres', false, null),
      finished: 0,
    });
    expect(OutboxEffects.effectsFrom(dialect, registryResult, row)).toEqual({
      event: registryResult,
      transition: null,
      proposal: null,
      proposalAverbacao: null,
      finishedAverbacao: null,
    });
  });

  it('a result finishing a registration tracked without a proposal', () => {
    const row = rowOf({ ...averbacaoColumns('ra', store as 'sqlite' | 'postgres', true, null), finished: 1 });
    const effects = OutboxEffects.effectsFrom(dialect, registryResult, row);
    expect(effects.event).toBe(registryResult);
    expect(effects.finishedAverbacao).toEqual(averbacao('ra', true, null));
  });

  it("a result that names its proposal keeps it, whatever the registration's row says", () => {
    const row = rowOf({
      ...averbacaoColumns('ra', store as 'sqlite' | 'postgres', true, pg ? '999' : 999),
      finished: 1,
    });
    const named = { ...registryResult, nu_proposta: 456 };
    const effects = OutboxEffects.effectsFrom(dialect, named, row);
    expect(effects.event).toBe(named);
    expect(effects.finishedAverbacao).toEqual(averbacao('ra', true, 999));
  });
});
