import { endOtherSessionsParams } from '../../../src/domain/sql/console-session-statements';
import {
  AVERBACAO_COLUMNS,
  averbacoesQuery,
  Conditions,
  EVENT_COLUMNS,
  eventsQuery,
  inList,
} from '../../../src/domain/sql/read-statements';
import { loneRows, type StoreQuery, type StoreSql } from '../../../src/domain/sql/store-sql';
import { sqliteDialect } from '../../../src/domain/sql/dialect';

/**
 * The functions that assemble statements in domain/sql/ (the texts themselves run against both
 * databases in test/integration/store-conformance.test.ts and query-plans.test.ts): which condition
 * is added, how placeholders are numbered, which values are bound in which order.
 */

describe('Conditions', () => {
  it('numbers each value from $1, in the order added, and joins the conditions with AND', () => {
    const c = new Conditions().add('a = ? OR b = ?', [1, 2]).add('c IS NULL').add('d < ?', ['x']);
    expect(c.where).toBe('WHERE a = $1 OR b = $2 AND c IS NULL AND d < $3');
    expect(c.params).toEqual([1, 2, 'x']);
  });

  it('adds a condition only when asked', () => {
    const c = new Conditions().add('a = ?', [1], false).add('b = ?', [2], true);
    expect(c.where).toBe('WHERE b = $1');
    expect(c.params).toEqual([2]);
  });

  it.each([
    ['undefined', undefined, false],
    ["''", '', false],
    ['0', 0, true],
    ['false', false, true],
    ['a string', 's', true],
  ])('given: a value of %s is %s', (_name, value, added) => {
    const c = new Conditions().given('x = ?', value);
    expect(c.where).toBe(added ? 'WHERE x = $1' : '');
    expect(c.params).toEqual(added ? [value] : []);
  });

  it('without conditions has no WHERE', () => {
    expect(new Conditions().where).toBe('');
  });

  it('limited: the LIMIT is the last value, numbered after the conditions', () => {
    expect(new Conditions().given('s = ?', 'done').limited('SELECT * FROM t', 'id DESC', 50)).toEqual({
      text: 'SELECT * FROM t WHERE s = $1 ORDER BY id DESC LIMIT $2',
      params: ['done', 50],
    });
    expect(new Conditions().limited('SELECT * FROM t', 'id', 5)).toEqual({
      text: 'SELECT * FROM t  ORDER BY id LIMIT $1',
      params: [5],
    });
  });
});

describe('inList', () => {
  it.each([
    [0, 1, '(NULL)'],
    [1, 1, '($1)'],
    [3, 4, '($4, $5, $6)'],
  ])('%i values from $%i: %s', (count, first, text) => {
    expect(inList(count, first)).toBe(text);
  });
});

describe('eventsQuery and averbacoesQuery', () => {
  it('events: each filter given, in the order the plans expect, newest first', () => {
    expect(
      eventsQuery({
        status: 'failed',
        evento: 'proposta.criada',
        kind: 'event',
        nuProposta: 7,
        beforeId: 90,
        limit: 20,
      }),
    ).toEqual({
      text: `SELECT ${EVENT_COLUMNS} FROM events WHERE status = $1 AND evento = $2 AND kind = $3 AND nu_proposta = $4 AND id < $5 ORDER BY id DESC LIMIT $6`,
      params: ['failed', 'proposta.criada', 'event', 7, 90, 20],
    });
  });

  it('events: no filter', () => {
    expect(eventsQuery({ limit: 3 })).toEqual({
      text: `SELECT ${EVENT_COLUMNS} FROM events  ORDER BY id DESC LIMIT $1`,
      params: [3],
    });
  });

  it('averbações: each filter given, the most recently created first', () => {
    expect(averbacoesQuery({ status: 'error', stale: false, nuProposta: 'A-1', limit: 10 })).toEqual({
      text: `SELECT ${AVERBACAO_COLUMNS} FROM averbacoes WHERE status = $1 AND stale = $2 AND nu_proposta = $3 ORDER BY created_at DESC LIMIT $4`,
      params: ['error', false, 'A-1', 10],
    });
    expect(averbacoesQuery({ limit: 1 }).params).toEqual([1]);
  });
});

describe('endOtherSessionsParams', () => {
  it("binds each configured fingerprint, '' for what is not configured", () => {
    expect(endOtherSessionsParams({ admin: 'fa', viewer: 'fv', oidc: 'fo' })).toEqual(['fa', 'fv', 'fo']);
    expect(endOtherSessionsParams({ admin: null, viewer: undefined, oidc: null } as never)).toEqual([
      '',
      '',
      '',
    ]);
  });
});

describe('loneRows', () => {
  /** A store recording where each statement ran. */
  function store(withLone: boolean): { log: StoreSql; ran: string[] } {
    const ran: string[] = [];
    const query = (where: string): StoreQuery => ({
      dialect: sqliteDialect,
      rows: <R>(text: string, params?: readonly unknown[]) => {
        ran.push(`${where}: ${text} ${JSON.stringify(params)}`);
        return Promise.resolve([{ where }] as R[]);
      },
      run: () => Promise.resolve(0),
    });
    const log: StoreSql = {
      dialect: sqliteDialect,
      read: (fn) => fn(query('read')),
      write: (fn) => fn(query('write')),
      ...(withLone ? { lone: query('lone') } : {}),
    };
    return { log, ran };
  }

  it('runs the statement on its own where the store can', async () => {
    const { log, ran } = store(true);
    await expect(loneRows(log, 'SELECT 1', [7])).resolves.toEqual([{ where: 'lone' }]);
    expect(ran).toEqual(['lone: SELECT 1 [7]']);
  });

  it('else in a snapshot of its own; no parameters are none', async () => {
    const { log, ran } = store(false);
    await expect(loneRows(log, 'SELECT 2')).resolves.toEqual([{ where: 'read' }]);
    expect(ran).toEqual(['read: SELECT 2 []']);
  });
});
