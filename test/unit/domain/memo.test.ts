import { boundedMemo } from '../../../src/domain/memo';

/** A memo of `key.length`, counting the computations. */
function counted(max: number): { memo: ReturnType<typeof boundedMemo<number>>; computed: string[] } {
  const computed: string[] = [];
  const memo = boundedMemo(max, (key) => {
    computed.push(key);
    return key.length;
  });
  return { memo, computed };
}

describe('boundedMemo', () => {
  it('computes a key once, then answers from what it kept', () => {
    const { memo, computed } = counted(2);
    expect([memo.get('a'), memo.get('bb'), memo.get('a'), memo.get('bb')]).toEqual([1, 2, 1, 2]);
    expect(computed).toEqual(['a', 'bb']);
    expect(memo.size).toBe(2);
  });

  it('keeps the first `max` keys only: a key past them is computed each time, right each time', () => {
    const { memo, computed } = counted(2);
    expect([memo.get('a'), memo.get('bb'), memo.get('ccc'), memo.get('ccc'), memo.get('a')]).toEqual([
      1, 2, 3, 3, 1,
    ]);
    expect(computed).toEqual(['a', 'bb', 'ccc', 'ccc']);
    expect(memo.size).toBe(2);
  });

  it('with a bound of 0 keeps nothing', () => {
    const { memo, computed } = counted(0);
    expect([memo.get('a'), memo.get('a')]).toEqual([1, 1]);
    expect(computed).toEqual(['a', 'a']);
    expect(memo.size).toBe(0);
  });
});
