import { type BackgroundGate, OPEN_GATE, whenGateClear } from '../../../src/domain/answer-first';

/**
 * The open gate and whenGateClear (domain/answer-first.ts). deferralStep and gateCleared:
 * test/unit/answer-first.test.ts.
 */

describe('OPEN_GATE: never holds anything', () => {
  it('is clear, not under load, not held', () => {
    expect([OPEN_GATE.whenClear(), OPEN_GATE.underLoad(), OPEN_GATE.held()]).toEqual([null, false, false]);
  });
});

/** A gate answering whenClear from a script (null: clear), counting the questions. */
function scriptedGate(answers: (Promise<void> | null)[]) {
  let asked = 0;
  const gate: BackgroundGate = {
    whenClear: () => {
      asked += 1;
      return answers.shift() ?? null;
    },
    underLoad: () => answers.length > 0,
    held: () => answers.length > 0,
  };
  return { gate, asked: () => asked };
}

function released() {
  let release!: () => void;
  const promise = new Promise<void>((resolve) => {
    release = resolve;
  });
  return { promise, release };
}

describe('whenGateClear: the work runs once the gate lets it, never dropped', () => {
  it.each<[string, BackgroundGate | undefined]>([
    ['no gate', undefined],
    ['the open gate', OPEN_GATE],
    ['a gate clear now', scriptedGate([null]).gate],
  ])('%s: runs at once', (_name, gate) => {
    const runs: string[] = [];
    whenGateClear(gate, () => runs.push('run'));
    expect(runs).toEqual(['run']);
  });

  it('a held gate: runs once it clears, asking again then', async () => {
    const wait = released();
    const { gate, asked } = scriptedGate([wait.promise, null]);
    const runs: string[] = [];
    whenGateClear(gate, () => runs.push('run'));
    expect(runs).toEqual([]);
    wait.release();
    // whenGateClear's reaction to the wait was registered first, so it has run once this resumes.
    await wait.promise;
    expect(runs).toEqual(['run']);
    expect(asked()).toBe(2);
  });

  it('a gate held again when asked after its wait (a slice closed meanwhile): waits again', async () => {
    const first = released();
    const second = released();
    const { gate, asked } = scriptedGate([first.promise, second.promise, null]);
    const runs: string[] = [];
    whenGateClear(gate, () => runs.push('run'));
    first.release();
    await first.promise;
    expect(runs).toEqual([]);
    expect(asked()).toBe(2);
    second.release();
    await second.promise;
    expect(runs).toEqual(['run']);
    expect(asked()).toBe(3);
  });
});
