import { eventFilter, FilterError, instant, proposalFilter, text } from '../../../src/http/console/filters';

describe('filters', () => {
  it.each([
    ['2026-11-21', '2026-11-21T00:00:00.000Z'],
    ['2026-11-21T10:00', '2026-11-21T10:00:00.000Z'],
    ['2026-11-21T10:00:30', '2026-11-21T10:00:30.000Z'],
    ['2026-11-21T10:00:00-03:00', '2026-11-21T13:00:00.000Z'],
    ['2026-11-21T10:00:00Z', '2026-11-21T10:00:00.000Z'],
  ])('instant %s → %s', (value, expected) => {
    expect(instant({ from: value }, 'from')).toBe(expected);
  });

  it.each(['yesterday', '2026-02-30', '2026-11-21 10:00', '21/11/2026', '2026-11-21T25:00'])(
    'instant %s is refused',
    (value) => {
      expect(() => instant({ from: value }, 'from')).toThrow(FilterError);
    },
  );

  it('reads blank values as absent, refuses repeated and overlong ones', () => {
    expect(text({ a: '  ' }, 'a')).toBeUndefined();
    expect(() => text({ a: ['x', 'y'] }, 'a')).toThrow('a: give it once');
    expect(() => text({ a: 'x'.repeat(201) }, 'a')).toThrow('a: at most 200 characters');
  });

  it('reads the events filters whole', () => {
    expect(
      eventFilter({
        status: 'dead',
        evento: ' proposta.criada ',
        nu_proposta: '42',
        json: '{"a":1}',
        before: '9',
      }),
    ).toEqual({
      status: 'dead',
      evento: 'proposta.criada',
      kind: undefined,
      nuProposta: 42,
      from: undefined,
      to: undefined,
      json: [{ path: '$."a"', keys: ['a'], value: 1 }],
      before: 9,
    });
    expect(eventFilter({ nu_proposta: 'ABC-1' }).nuProposta).toBe('ABC-1');
  });

  it('reads the proposals cursor and age', () => {
    const f = proposalFilter({ age: '36h', after: '2026-11-21T10:00:00.000Z~123', stuck: 'yes' });
    expect(f.ageMs).toBe(36 * 3_600_000);
    expect(f.after).toEqual({ updated_at: '2026-11-21T10:00:00.000Z', nu_proposta: 123 });
    expect(f.stuck).toBe(true);
    expect(() => proposalFilter({ after: 'x~1' })).toThrow('after: not a cursor');
    expect(() => proposalFilter({ age: '36' })).toThrow('age: expected a duration');
  });
});
