import { join } from 'node:path';

import * as Circuit from '../../../../src/domain/forwarding/circuit';
import { type CircuitOptions, type CircuitState } from '../../../../src/domain/forwarding/circuit';
import type { AttemptOutcome } from '../../../../src/domain/forwarding/retry';
import { loadAgainInEachTest } from '../fresh-module';

// Loaded again in each test, so that Stryker runs these tests against its module-level tables and
// patterns too (fresh-module.ts).
loadAgainInEachTest(Circuit, join(__dirname, '../../../../src/domain/forwarding/circuit'));
const { circuitAfter, circuitProbing, mayAttempt } = Circuit;
const { CLOSED, DEFAULT_CIRCUIT, HALF_OPEN_RECHECK_MS } = Circuit;

const OPTIONS: CircuitOptions = {
  failureThreshold: 3,
  openMs: 1000,
  maxOpenMs: 5000,
  probeTimeoutMs: 10_000,
};

/** One step: an attempt's outcome at a time, or the probe `mayAttempt` allows being sent. */
type Step = [AttemptOutcome | 'probe', number];

function run(
  steps: readonly Step[],
  options: CircuitOptions = OPTIONS,
  from: CircuitState = CLOSED,
): CircuitState {
  return steps.reduce<CircuitState>((state, [what, at]) => {
    if (what !== 'probe') return circuitAfter(state, what, at, options);
    expect(mayAttempt(state, at, options)).toEqual({ allowed: true, probe: true });
    return circuitProbing(state, at);
  }, from);
}

const t = (at: number): Step => ['temporary', at];
const OPENED: Step[] = [t(0), t(1), t(2)]; // open from 2 to 1002

/** From closed, with OPTIONS: the steps, and the state they end in. */
const SEQUENCES: [string, Step[], CircuitState][] = [
  ['nothing yet', [], { state: 'closed', failures: 0 }],
  ['a delivery', [['delivered', 0]], { state: 'closed', failures: 0 }],
  ['two temporary failures count', [t(0), t(1)], { state: 'closed', failures: 2 }],
  ['the third opens for openMs', OPENED, { state: 'open', since: 2, until: 1002, failures: 3 }],
  [
    'a delivery resets the count',
    [t(0), t(1), ['delivered', 2], t(3), t(4)],
    { state: 'closed', failures: 2 },
  ],
  [
    'a permanent answer resets the count too (the destination answers)',
    [t(0), t(1), ['permanent', 2], t(3), t(4)],
    { state: 'closed', failures: 2 },
  ],
  [
    'permanent answers alone never open',
    Array.from({ length: 10 }, (_, i): Step => ['permanent', i]),
    CLOSED,
  ],
  [
    'a late failure while open is counted but does not extend it',
    [...OPENED, t(500)],
    { state: 'open', since: 2, until: 1002, failures: 4 },
  ],
  ['a late delivery while open closes', [...OPENED, ['delivered', 500]], CLOSED],
  [
    'the probe after until half-opens it',
    [...OPENED, ['probe', 1002]],
    { state: 'half_open', failures: 3, lastOpenMs: 1000, probeSince: 1002 },
  ],
  ['a delivered probe closes', [...OPENED, ['probe', 1002], ['delivered', 1100]], CLOSED],
  ['a probe answered 4xx closes', [...OPENED, ['probe', 1002], ['permanent', 1100]], CLOSED],
  [
    'a failed probe reopens for twice as long',
    [...OPENED, ['probe', 1002], t(1100)],
    { state: 'open', since: 1100, until: 3100, failures: 4 },
  ],
  [
    'failed probes double the open time up to maxOpenMs',
    [
      ...[...OPENED, ['probe', 1002], t(1100)], // open 2000 ms
      ...[['probe', 3100], t(3100)], // open 4000 ms
      ...[['probe', 7100], t(7100)], // open 5000 ms (capped, not 8000)
      ...[['probe', 12_100], t(12_200)], // still 5000 ms
    ] as Step[],
    { state: 'open', since: 12_200, until: 17_200, failures: 7 },
  ],
  [
    'after a good probe, the next opening starts again at openMs',
    [...OPENED, ['probe', 1002], t(1100), ['probe', 3100], ['delivered', 3200], t(4000), t(4001), t(4002)],
    { state: 'open', since: 4002, until: 5002, failures: 3 },
  ],
  [
    'a failure after until counts as the failed probe even without circuitProbing',
    [...OPENED, t(1500)],
    { state: 'open', since: 1500, until: 3500, failures: 4 },
  ],
];

/** The same with other options. */
const SEQUENCES_WITH_OPTIONS: [string, CircuitOptions, Step[], CircuitState][] = [
  [
    'threshold 1: the first failure opens',
    { ...OPTIONS, failureThreshold: 1 },
    [t(0)],
    { state: 'open', since: 0, until: 1000, failures: 1 },
  ],
  [
    'threshold 0 behaves as 1',
    { ...OPTIONS, failureThreshold: 0 },
    [t(0)],
    { state: 'open', since: 0, until: 1000, failures: 1 },
  ],
  [
    'openMs above maxOpenMs is capped',
    { ...OPTIONS, openMs: 9000 },
    OPENED,
    { state: 'open', since: 2, until: 5002, failures: 3 },
  ],
  [
    'the defaults: 4 failures stay closed',
    DEFAULT_CIRCUIT,
    [t(0), t(1), t(2), t(3)],
    { state: 'closed', failures: 4 },
  ],
  [
    'the defaults: the 5th opens for 30 s',
    DEFAULT_CIRCUIT,
    [t(0), t(1), t(2), t(3), t(4)],
    { state: 'open', since: 4, until: 30_004, failures: 5 },
  ],
  [
    'the defaults: doubling stops at 10 min',
    DEFAULT_CIRCUIT,
    [
      ...[t(0), t(0), t(0), t(0), t(0)], // 30 s
      ...[['probe', 30_000], t(30_000)], // 60 s
      ...[['probe', 90_000], t(90_000)], // 120 s
      ...[['probe', 210_000], t(210_000)], // 240 s
      ...[['probe', 450_000], t(450_000)], // 480 s
      ...[['probe', 930_000], t(930_000)], // 600 s, not 960 s
    ] as Step[],
    { state: 'open', since: 930_000, until: 1_530_000, failures: 10 },
  ],
];

describe('circuitAfter over sequences of outcomes', () => {
  it.each(SEQUENCES)('%s', (_name, steps, expected) => {
    expect(run(steps)).toEqual(expected);
  });

  it.each(SEQUENCES_WITH_OPTIONS)('%s', (_name, options, steps, expected) => {
    expect(run(steps, options)).toEqual(expected);
  });
});

describe('mayAttempt', () => {
  const open: CircuitState = { state: 'open', since: 2, until: 1002, failures: 3 };
  const halfOpen: CircuitState = { state: 'half_open', failures: 3, lastOpenMs: 1000, probeSince: 1002 };

  it.each<[string, CircuitState, number, ReturnType<typeof mayAttempt>]>([
    ['closed: yes', CLOSED, 0, { allowed: true, probe: false }],
    ['closed after failures: yes', { state: 'closed', failures: 2 }, 0, { allowed: true, probe: false }],
    ['open: no, look again at until', open, 500, { allowed: false, retryAtMs: 1002 }],
    ['open, 1 ms before until: no', open, 1001, { allowed: false, retryAtMs: 1002 }],
    ['open, at until: one probe', open, 1002, { allowed: true, probe: true }],
    ['open, long after until: one probe', open, 99_999, { allowed: true, probe: true }],
    [
      'half open: no second probe',
      halfOpen,
      1500,
      { allowed: false, retryAtMs: 1500 + HALF_OPEN_RECHECK_MS },
    ],
    ['half open, probe just under its timeout: no', halfOpen, 11_001, { allowed: false, retryAtMs: 12_001 }],
    [
      'half open, probe unanswered for probeTimeoutMs: a new probe',
      halfOpen,
      11_002,
      { allowed: true, probe: true },
    ],
  ])('%s', (_name, state, now, expected) => {
    expect(mayAttempt(state, now, OPTIONS)).toEqual(expected);
  });

  it('defaults to a 2-minute probe timeout', () => {
    expect(mayAttempt(halfOpen, 1002 + 119_999)).toEqual({ allowed: false, retryAtMs: 1002 + 120_999 });
    expect(mayAttempt(halfOpen, 1002 + 120_000)).toEqual({ allowed: true, probe: true });
  });

  it('lets exactly one of two concurrent senders probe', () => {
    let state: CircuitState = open;
    const first = mayAttempt(state, 1002, OPTIONS);
    if (first.allowed && first.probe) state = circuitProbing(state, 1002);
    expect(first).toEqual({ allowed: true, probe: true });
    expect(mayAttempt(state, 1003, OPTIONS)).toEqual({
      allowed: false,
      retryAtMs: 1003 + HALF_OPEN_RECHECK_MS,
    });
  });
});

describe('circuitProbing', () => {
  it.each<[string, CircuitState, CircuitState]>([
    ['closed stays as it is', { state: 'closed', failures: 2 }, { state: 'closed', failures: 2 }],
    [
      'open becomes half open, remembering how long it was open',
      { state: 'open', since: 100, until: 4100, failures: 6 },
      { state: 'half_open', failures: 6, lastOpenMs: 4000, probeSince: 5000 },
    ],
    [
      'half open (a timed-out probe) gets a fresh probeSince',
      { state: 'half_open', failures: 6, lastOpenMs: 4000, probeSince: 10 },
      { state: 'half_open', failures: 6, lastOpenMs: 4000, probeSince: 5000 },
    ],
  ])('%s', (_name, state, expected) => {
    expect(circuitProbing(state, 5000)).toEqual(expected);
  });

  it('does not change the state it is given', () => {
    const state: CircuitState = { state: 'open', since: 100, until: 4100, failures: 6 };
    const copy = { ...state };
    circuitProbing(state, 5000);
    circuitAfter(state, 'temporary', 200, OPTIONS);
    expect(state).toEqual(copy);
  });
});

describe('circuitAfter at the end of an open period', () => {
  // Open from 2 to 1002 (OPENED): a failure before `until` is a late answer, at `until` a failed probe.
  const opened = run(OPENED);
  it.each<[number, CircuitState]>([
    [1001, { state: 'open', since: 2, until: 1002, failures: 4 }],
    [1002, { state: 'open', since: 1002, until: 3002, failures: 4 }],
    [1003, { state: 'open', since: 1003, until: 3003, failures: 4 }],
  ])('a temporary failure at %p → %j', (at, expected) => {
    expect(circuitAfter(opened, 'temporary', at, OPTIONS)).toEqual(expected);
  });
});
