import { spoolGap } from '../../../src/domain/relay-gap';

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
