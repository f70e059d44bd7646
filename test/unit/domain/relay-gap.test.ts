import { hasGap, idRuns, spoolGap } from '../../../src/domain/relay-gap';

describe('spoolGap: PostgreSQL’s record of a spool against the relay’s cursor', () => {
  it.each([
    ['PostgreSQL holds exactly what was relayed', 470, 470, null],
    ['PostgreSQL holds more (a spool cursor restored from an older copy)', 400, 470, null],
    ['nothing relayed yet, no row', 0, null, null],
    ['a promoted standby behind the spool', 470, 387, { from: 388, through: 470 }],
    ['one row missing', 11, 10, { from: 11, through: 11 }],
    ['no row for a spool that relayed (its first batch was lost)', 25, null, { from: 1, through: 25 }],
    ['a row at 0 for a spool that relayed', 3, 0, { from: 1, through: 3 }],
  ])('%s', (_name, cursor, recorded, gap) => {
    expect(spoolGap(cursor, recorded)).toEqual(gap);
  });
});

describe('idRuns: ids as runs of consecutive ids', () => {
  it.each([
    [[], []],
    [[7], [{ from: 7, through: 7 }]],
    [
      [3, 4, 5, 9],
      [
        { from: 3, through: 5 },
        { from: 9, through: 9 },
      ],
    ],
    [
      [1, 3, 5],
      [
        { from: 1, through: 1 },
        { from: 3, through: 3 },
        { from: 5, through: 5 },
      ],
    ],
  ])('%j', (ids, runs) => {
    expect(idRuns(ids)).toEqual(runs);
  });
});

describe('hasGap: what relay verify reports as a loss', () => {
  it.each([
    ['all there', { relayedThrough: 10, recorded: 10, missing: [] }, false],
    [
      'PostgreSQL ahead of a cursor restored from an older copy',
      { relayedThrough: 8, recorded: 10, missing: [] },
      false,
    ],
    ['the record behind the cursor', { relayedThrough: 10, recorded: 7, missing: [] }, true],
    [
      'rows missing under a record that covers them',
      { relayedThrough: 10, recorded: 10, missing: [{ from: 4, through: 4 }] },
      true,
    ],
    ['no record, nothing relayed', { relayedThrough: 0, recorded: null, missing: [] }, false],
  ])('%s', (_name, verdict, gap) => {
    expect(hasGap(verdict)).toBe(gap);
  });
});
