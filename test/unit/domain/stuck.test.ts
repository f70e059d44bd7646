import { join } from 'node:path';

import { FINAL_STATUSES, NON_FINAL_STATUSES, PROPOSAL_STATUSES } from '../../../src/domain/lifecycle';
import * as Stuck from '../../../src/domain/stuck';
import { loadAgainInEachTest } from './fresh-module';

// Loaded again in each test, so that Stryker runs these tests against its module-level tables and
// patterns too (fresh-module.ts).
loadAgainInEachTest(Stuck, join(__dirname, '../../../src/domain/stuck'));
const { formatLimit, isStuck, limitOf, parseStuckAfter, stuckCutoffs, stuckSince } = Stuck;
const { DEFAULT_STUCK_AFTER } = Stuck;

const MIN = 60_000;
const HOUR = 60 * MIN;
const DAY = 24 * HOUR;
const NOW = new Date('2026-03-10T12:00:00.000Z');
const ago = (ms: number) => new Date(NOW.getTime() - ms).toISOString();

describe('DEFAULT_STUCK_AFTER', () => {
  it('has a limit for every non-final status and none for a final one', () => {
    expect(Object.keys(DEFAULT_STUCK_AFTER).sort()).toEqual([...NON_FINAL_STATUSES].sort());
    for (const status of NON_FINAL_STATUSES) expect(DEFAULT_STUCK_AFTER[status]).toBeGreaterThan(0);
    for (const status of FINAL_STATUSES) expect(limitOf(status, DEFAULT_STUCK_AFTER)).toBeNull();
    expect(Object.isFrozen(DEFAULT_STUCK_AFTER)).toBe(true);
  });

  it('matches the limits documented in the config (contract §3)', () => {
    expect(
      Object.fromEntries(NON_FINAL_STATUSES.map((s) => [s, formatLimit(DEFAULT_STUCK_AFTER[s])])),
    ).toEqual({
      em_analise: '1d',
      pre_aprovada: '3d',
      aprovada: '3d',
      averbacao_solicitada: '2d',
      averbada: '3d',
      formalizacao_iniciada: '7d',
      formalizada: '3d',
      efetivada: '3d',
      pagamento_falhou: '2d',
    });
  });
});

describe('parseStuckAfter', () => {
  it.each([
    [undefined, {}],
    ['', {}],
    [' , ', {}],
    ['averbacao_solicitada=36h', { averbacao_solicitada: 36 * HOUR }],
    ['formalizacao_iniciada=5d', { formalizacao_iniciada: 5 * DAY }],
    ['em_analise=90m', { em_analise: 90 * MIN }],
    ['aprovada=off', { aprovada: null }],
    ['aprovada=OFF, em_analise=2H', { aprovada: null, em_analise: 2 * HOUR }],
    [
      'averbacao_solicitada=36h,formalizacao_iniciada=5d,aprovada=off',
      { averbacao_solicitada: 36 * HOUR, formalizacao_iniciada: 5 * DAY, aprovada: null },
    ],
    [' pagamento_falhou = 3650d ', { pagamento_falhou: 3650 * DAY }],
    ['aprovada = off', { aprovada: null }],
  ])('%p overrides only what it names', (text, overrides) => {
    const limits = parseStuckAfter(text);
    expect(limits).toEqual({ ...DEFAULT_STUCK_AFTER, ...overrides });
    expect(Object.isFrozen(limits)).toBe(true);
  });

  it.each([
    ['foo=1d', /^unknown status "foo" \(expected one of em_analise, pre_aprovada, .*pagamento_falhou\)$/],
    ['Aprovada=1d', /^unknown status "Aprovada"/],
    ['paga=1d', /^paga is a final status: it is never stuck$/],
    ['averbacao_negada=off', /^averbacao_negada is a final status/],
    ['averbacao_solicitada=36x', /^averbacao_solicitada: expected a duration .* got "36x"$/],
    ['averbacao_solicitada=36', /^averbacao_solicitada: .* got "36"$/],
    ['averbacao_solicitada=0h', /^averbacao_solicitada: .* got "0h"$/],
    ['averbacao_solicitada=-1d', /^averbacao_solicitada: .* got "-1d"$/],
    ['averbacao_solicitada=1.5d', /^averbacao_solicitada: .* got "1.5d"$/],
    ['averbacao_solicitada=3651d', /^averbacao_solicitada: .* got "3651d"$/],
    ['averbacao_solicitada=', /^averbacao_solicitada: .* got ""$/],
    [
      'averbacao_solicitada',
      /^expected status=duration \(e\.g\. averbacao_solicitada=36h\), got "averbacao_solicitada"$/,
    ],
    ['aprovada=1d,aprovada=off', /^aprovada is given twice$/],
    ['=36h', /^unknown status "" \(expected one of em_analise, /],
  ])('refuses %p with one line naming the entry', (text, message) => {
    expect(() => parseStuckAfter(text)).toThrow(RangeError);
    expect(() => parseStuckAfter(text)).toThrow(message);
  });
});

describe('isStuck, stuckSince', () => {
  const limits = parseStuckAfter('averbacao_solicitada=36h,aprovada=off');
  it.each([
    ['averbacao_solicitada, 35h', false, 'averbacao_solicitada', 35 * HOUR],
    ['averbacao_solicitada, exactly 36h: not yet', false, 'averbacao_solicitada', 36 * HOUR],
    ['averbacao_solicitada, 36h + 1 ms', true, 'averbacao_solicitada', 36 * HOUR + 1],
    ['em_analise (default 1d), 2d', true, 'em_analise', 2 * DAY],
    ['em_analise, 1h', false, 'em_analise', HOUR],
    ['formalizacao_iniciada (default 7d), 6d', false, 'formalizacao_iniciada', 6 * DAY],
    ['aprovada=off, a year', false, 'aprovada', 365 * DAY],
    ['paga (final), a year', false, 'paga', 365 * DAY],
    ['negada (final)', false, 'negada', 365 * DAY],
    ['an unknown status', false, 'x', 365 * DAY],
    ['changed in the future (clock skew)', false, 'em_analise', -HOUR],
  ])('%s: stuck %p', (_name, expected, status, age) => {
    expect(isStuck({ status, updated_at: ago(age) }, limits, NOW)).toBe(expected);
  });

  it('stuckSince is the last change plus the limit, null without a limit', () => {
    const row = { status: 'averbacao_solicitada', updated_at: '2026-03-01T00:00:00.000Z' };
    expect(stuckSince(row, limits)).toBe('2026-03-02T12:00:00.000Z');
    expect(stuckSince({ ...row, status: 'aprovada' }, limits)).toBeNull();
    expect(stuckSince({ ...row, status: 'paga' }, limits)).toBeNull();
    expect(stuckSince({ ...row, updated_at: 'not a time' }, limits)).toBeNull();
  });

  it('stuckCutoffs gives the same answer as isStuck, for the statuses with a limit, in contract §6 order', () => {
    const cutoffs = stuckCutoffs(limits, NOW);
    expect(cutoffs.map((c) => c.status)).toEqual(NON_FINAL_STATUSES.filter((s) => s !== 'aprovada'));
    expect(cutoffs.find((c) => c.status === 'averbacao_solicitada')?.before).toBe(ago(36 * HOUR));
    // The store's `status = ? AND updated_at < before` and isStuck agree on every status and age.
    for (const status of PROPOSAL_STATUSES) {
      for (const age of [0, HOUR, DAY - 1, DAY, DAY + 1, 36 * HOUR + 1, 3 * DAY + 1, 8 * DAY]) {
        const row = { status, updated_at: ago(age) };
        const c = cutoffs.find((x) => x.status === status);
        expect(c !== undefined && row.updated_at < c.before).toBe(isStuck(row, limits, NOW));
      }
    }
  });
});

describe('formatLimit', () => {
  it.each([
    [36 * HOUR, '36h'],
    [2 * DAY, '2d'],
    [90 * MIN, '90m'],
    [null, 'off'],
  ])('%p → %s', (ms, text) => {
    expect(formatLimit(ms)).toBe(text);
    if (ms !== null) expect(parseStuckAfter(`em_analise=${text}`).em_analise).toBe(ms);
  });
});
