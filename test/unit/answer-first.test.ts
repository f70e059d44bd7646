import {
  type BackgroundGate,
  DEFAULT_DEFERRAL,
  type DeferralState,
  deferralStep,
  gateCleared,
  OPEN_GATE,
} from '../../src/domain/answer-first';

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

describe('gateCleared', () => {
  /** A gate held until `open()`; each whenClear while held is a fresh wait, as AnswerFirst's. */
  function heldGate() {
    let held = true;
    const waiters: (() => void)[] = [];
    const gate: BackgroundGate = {
      whenClear: () => (held ? new Promise<void>((resolve) => waiters.push(resolve)) : null),
      underLoad: () => held,
      held: () => held,
    };
    const wake = (stillHeld: boolean) => {
      held = stillHeld;
      for (const resolve of waiters.splice(0)) resolve();
    };
    return { gate, wake, waiting: () => waiters.length };
  }

  it('resolves at once without a gate or with a clear one, and only once the gate clears otherwise (asked again after each wait)', async () => {
    await gateCleared(undefined);
    await gateCleared(OPEN_GATE);
    const { gate, wake, waiting } = heldGate();
    let cleared = false;
    const wait = gateCleared(gate).then(() => {
      cleared = true;
    });
    await Promise.resolve();
    expect(cleared).toBe(false);
    wake(true); // woken while still held (a slice that closed): it waits again
    await new Promise((resolve) => setImmediate(resolve));
    expect(cleared).toBe(false);
    expect(waiting()).toBe(1);
    wake(false);
    await wait;
    expect(cleared).toBe(true);
  });

  it('stops waiting once `stopped` says so', async () => {
    const { gate, wake } = heldGate();
    let stopped = false;
    let cleared = false;
    const wait = gateCleared(gate, () => stopped).then(() => {
      cleared = true;
    });
    stopped = true;
    wake(true);
    // Every promise has settled by then (no timer in between): it resolved although the gate is
    // still held (a wait it began before seeing `stopped` is left to the gate).
    await new Promise((resolve) => setImmediate(resolve));
    expect(cleared).toBe(true);
    await wait;
  });
});

describe('deferralStep with a quiet gap', () => {
  const quiet = { maxDeferMs: 500, sliceMs: 25, quietMs: 2 };

  it('opens only once no answer began for quietMs after the last one ended', () => {
    const held = deferralStep({ kind: 'open' }, 1, 1000, quiet);
    const gap = deferralStep(held, 0, 1010, quiet);
    expect(gap).toEqual({ kind: 'held', sinceMs: 1000, sliceAtMs: 1500, quietUntilMs: 1012 });
    expect(deferralStep(gap, 0, 1011, quiet)).toBe(gap);
    expect(deferralStep(gap, 0, 1012, quiet)).toEqual({ kind: 'open' });
  });

  it('an answer beginning during the gap holds again, and the next gap starts from its end', () => {
    const gap = deferralStep(deferralStep({ kind: 'open' }, 1, 1000, quiet), 0, 1010, quiet);
    const again = deferralStep(gap, 1, 1011, quiet);
    expect(again).toEqual({ kind: 'held', sinceMs: 1000, sliceAtMs: 1500 });
    expect(deferralStep(again, 0, 1020, quiet)).toEqual({ ...again, quietUntilMs: 1022 });
  });

  it('the default policy has a gap of 2 ms', () => {
    expect(DEFAULT_DEFERRAL.quietMs).toBe(2);
  });
});
