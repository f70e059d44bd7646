import { DEFAULT_DEFERRAL, type DeferralState, deferralStep } from '../../src/domain/answer-first';

const policy = { maxDeferMs: 500, sliceMs: 25 };

describe('deferralStep (issue 23: the answer comes first)', () => {
  it('holds background work while an answer is being made, and opens when none is', () => {
    const held = deferralStep({ kind: 'open' }, 1, 1000, policy);
    expect(held).toEqual({ kind: 'held', sinceMs: 1000, sliceAtMs: 1500 });
    expect(deferralStep(held, 3, 1200, policy)).toBe(held);
    expect(deferralStep(held, 0, 1200, policy)).toEqual({ kind: 'open' });
  });

  it('gives background work a slice after maxDeferMs of continuous holding, then holds again, keeping when the overload began', () => {
    let s: DeferralState = deferralStep({ kind: 'open' }, 1, 0, policy);
    s = deferralStep(s, 1, 500, policy);
    expect(s).toEqual({ kind: 'slice', sinceMs: 0, untilMs: 525 });
    expect(deferralStep(s, 1, 510, policy)).toBe(s);
    s = deferralStep(s, 1, 525, policy);
    expect(s).toEqual({ kind: 'held', sinceMs: 0, sliceAtMs: 1025 });
  });

  it('the default floor is a small share of the time', () => {
    const share = DEFAULT_DEFERRAL.sliceMs / (DEFAULT_DEFERRAL.maxDeferMs + DEFAULT_DEFERRAL.sliceMs);
    expect(share).toBeLessThan(0.1);
  });
});
