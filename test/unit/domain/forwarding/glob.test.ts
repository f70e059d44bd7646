import { anyGlobMatches, globMatches } from '../../../../src/domain/forwarding/glob';

describe('globMatches', () => {
  it.each([
    ['averbacao.*', 'averbacao.aprovada', true],
    ['averbacao.*', 'averbacao.', true], // `*` matches the empty run
    ['averbacao.*', 'averbacao', false],
    ['averbacao.*', 'proposta.aprovada', false],
    ['*', 'proposal.changed', true],
    ['*', '', true],
    ['**', 'anything', true],
    ['proposal.changed', 'proposal.changed', true],
    ['proposal.changed', 'proposal.changed.v2', false],
    ['proposal.changed', 'xproposal.changed', false],
    ['proposal.changed', 'Proposal.changed', false], // case-sensitive
    ['*.falha', 'pagamento.falha', true],
    ['*.falha', 'pagamento.falhou', false],
    ['*.*', 'event.received', true],
    ['*.*', 'nodot', false],
    ['proposta.*da', 'proposta.aprovada', true],
    ['proposta.*da', 'proposta.negada', true],
    ['proposta.*da', 'proposta.criadas', false],
    ['a*a', 'a', false], // the first and last pieces must not overlap
    ['a*a', 'aa', true],
    ['ab*bc', 'abc', false],
    ['*x*x', 'x', false], // a middle piece must not overlap the last one
    ['*x*x', 'xx', true],
    ['a*b*b', 'ab', false],
    ['a*b*b', 'abb', true],
    ['*a*b*c*', 'xaybzc', true],
    ['*a*b*c*', 'xcybza', false],
    ['*ab*ba*', 'aba', false], // two middle pieces must not overlap each other
    ['*ab*ba*', 'abba', true],
    ['', '', true],
    ['', 'x', false],
  ])('%p against %p → %p', (pattern, name, expected) => {
    expect(globMatches(pattern, name)).toBe(expected);
  });

  it.each([
    ['.', 'averbacao.aprovada', 'averbacao.aprovada', true],
    ['a dot is literal', 'averbacao.aprovada', 'averbacaoXaprovada', false],
    ['? is literal', 'a?c', 'abc', false],
    ['[ is literal', '[ab]', 'a', false],
    ['regex syntax is literal', '(a|b)+', '(a|b)+', true],
    ['backslash is literal', 'a\\*', 'a\\bc', true],
  ])('%s', (_label, pattern, name, expected) => {
    expect(globMatches(pattern, name)).toBe(expected);
  });

  // A regex for `*a*a*a*a*b` backtracks exponentially on a long run of `a`s without the `b`: such a
  // matcher would not finish within the test's timeout (no wall-clock assertion needed).
  it('finishes on patterns that make a backtracking matcher explode', () => {
    const name = 'a'.repeat(100_000);
    expect(globMatches('*a*a*a*a*a*a*a*a*a*a*a*a*b', name)).toBe(false);
    expect(globMatches('*a*a*a*a*a*a*a*a*a*a*a*a*b*', name)).toBe(false); // `b` is searched for once
    expect(globMatches(`${'*a'.repeat(1000)}*b*`, name)).toBe(false);
    expect(globMatches(`${'*a'.repeat(1000)}*`, name)).toBe(true);
  });
});

describe('anyGlobMatches', () => {
  it.each([
    [['proposal.*', 'event.received'], 'event.received', true],
    [['proposal.*', 'event.received'], 'proposal.changed', true],
    [['proposal.*', 'event.received'], 'averbacao.result', false],
    [[], 'event.received', false],
  ])('%p against %p → %p', (patterns, name, expected) => {
    expect(anyGlobMatches(patterns, name)).toBe(expected);
  });
});
