import { join } from 'node:path';

import * as DeliveryAlarm from '../../../src/domain/delivery-alarm';
import {
  type DeliveryAlarmState,
  type DeliveryAnswer,
  type FailedAnswer,
  type SilenceState,
} from '../../../src/domain/delivery-alarm';
import type { DeliveryOutcome } from '../../../src/domain/delivery';
import { loadAgainInEachTest } from './fresh-module';

// Loaded again in each test, so that Stryker runs these tests against its module-level tables and
// patterns too (fresh-module.ts).
loadAgainInEachTest(DeliveryAlarm, join(__dirname, '../../../src/domain/delivery-alarm'));
const {
  alarmRaised,
  alarmSpeaksAt,
  describeRun,
  judgeSilence,
  likelyCause,
  recordAnswer,
  runOfAnswers,
  runSpeaksSince,
} = DeliveryAlarm;
const { ACCEPTED_ANSWERS, FAILED_ANSWERS, noFailures, noSilence } = DeliveryAlarm;

/** Replays answers one second apart; returns where the alarm spoke and the final state. */
function run(answers: readonly DeliveryAnswer[], from: DeliveryAlarmState = noFailures) {
  let state = from;
  const alarms = answers.map((answer, i) => {
    const step = recordAnswer(state, answer, i * 1000);
    state = step.state;
    return step.alarm;
  });
  return { alarms, state };
}

const failed = Object.keys(FAILED_ANSWERS) as FailedAnswer[];

describe('recordAnswer: every kind of failed answer counts (interface §6.1, rule 4)', () => {
  it.each(failed)('three %s in a row raise the alarm on the third', (answer) => {
    const { alarms, state } = run([answer, answer, answer]);
    expect(alarms).toEqual([false, false, true]);
    expect(state).toMatchObject({ consecutive: 3, byAnswer: { [answer]: 3 }, lastAnswer: answer });
    expect(alarmRaised(state)).toBe(true);
  });

  it.each(ACCEPTED_ANSWERS)('a 200 (%s) ends the run', (ok) => {
    const { alarms, state } = run(['payload_too_large', 'storage_unavailable', ok, 'forbidden', 'aborted']);
    expect(alarms).toEqual([false, false, false, false, false]);
    expect(state).toMatchObject({
      consecutive: 2,
      byAnswer: { forbidden: 1, aborted: 1 },
      firstFailureAt: 3000,
    });
    expect(alarmRaised(state)).toBe(false);
  });

  it.each([0, 1, 2, 3, 4, 12])('alarmRaised after %d failures in a row: from the third on', (n) => {
    expect(alarmRaised(run(Array(n).fill('forbidden')).state)).toBe(n >= 3);
  });

  it.each([
    [
      'mixed kinds add up to one run',
      ['invalid_signature', 'payload_too_large', 'storage_unavailable'],
      [false, false, true],
    ],
    ['two failures are not yet an alarm', ['forbidden', 'aborted'], [false, false]],
    [
      'then again on the 13th and the 23rd, not in between',
      Array(23).fill('storage_unavailable'),
      Array.from({ length: 23 }, (_, i) => i + 1 === 3 || i + 1 === 13 || i + 1 === 23),
    ],
    [
      'a 200 before the third failure means no alarm',
      ['aborted', 'aborted', 'duplicate', 'aborted', 'aborted'],
      Array(5).fill(false),
    ],
  ] as const)('%s', (_name, answers, expected) => {
    expect(run(answers as readonly DeliveryAnswer[]).alarms).toEqual(expected);
  });

  it('failures far apart still count: the service has no time window', () => {
    let state = noFailures;
    for (const at of [0, 86_400_000, 2 * 86_400_000]) state = recordAnswer(state, 'forbidden', at).state;
    expect(state).toMatchObject({ consecutive: 3, firstFailureAt: 0, lastFailureAt: 2 * 86_400_000 });
  });

  it('changed is false only for a 200 with no run, so that path writes nothing', () => {
    expect(recordAnswer(noFailures, 'accepted', 1).changed).toBe(false);
    expect(recordAnswer(noFailures, 'forbidden', 1).changed).toBe(true);
    const afterOne = recordAnswer(noFailures, 'forbidden', 1).state;
    expect(recordAnswer(afterOne, 'accepted', 2)).toEqual({ state: noFailures, alarm: false, changed: true });
  });

  it('a run loaded after a restart goes on counting from where it was', () => {
    const stored = run(['payload_too_large', 'payload_too_large']).state;
    expect(run(['payload_too_large'], stored).alarms).toEqual([true]);
  });

  it('the outcomes of the deliveries table and the answers of the rule are the same set', () => {
    // Type-level both ways: an outcome added to one and not the other fails the type-check.
    const outcomes: DeliveryOutcome[] = [...ACCEPTED_ANSWERS, ...failed];
    const answers: DeliveryAnswer[] = outcomes;
    expect(new Set(answers).size).toBe(8);
  });
});

describe('likelyCause and describeRun name what to check', () => {
  const settings = { signatureHeader: 'X-Brand-Signature', maxBodyBytes: 1234 };
  it.each([
    ['invalid_signature', /WEBHOOK_SECRETS.*X-Brand-Signature/],
    ['payload_too_large', /MAX_BODY_BYTES \(1234\)/],
    ['storage_unavailable', /disk.*write lock/],
    ['forbidden', /ALLOWED_CIDRS/],
    ['aborted', /cut off/],
  ] as const)('%s', (answer, pattern) => {
    expect(likelyCause(answer, settings)).toMatch(pattern);
  });

  it('describes a mixed run by kind', () => {
    expect(describeRun(run(['forbidden', 'payload_too_large', 'forbidden']).state)).toBe(
      'forbidden ×2, payload_too_large ×1',
    );
  });
});

describe('judgeSilence', () => {
  const hour = 3_600_000;
  function at(prev: SilenceState, now: number, inFlight: number | null, silenceMs = hour) {
    return judgeSilence(prev, { now, lastDeliveryAt: 0, silenceMs, inFlight });
  }

  it.each([
    ['shorter than the threshold', hour - 1, 5, false],
    ['long enough, proposals in flight', hour, 5, true],
    ['long enough, nothing in flight (silence is normal)', 2 * hour, 0, false],
    ['long enough but not counted', 2 * hour, null, false],
    ['disabled by 0', 10 * hour, 5, false],
  ] as const)('%s', (name, now, inFlight, raised) => {
    const step = at(noSilence, now, inFlight, name === 'disabled by 0' ? 0 : hour);
    expect(step.state.raised).toBe(raised);
    expect(step.log).toBe(raised ? 'raised' : null);
    expect(step.silentMs).toBe(now);
  });

  it('repeats every silenceMs while raised, and says when it ends', () => {
    const raised = at(noSilence, hour, 3);
    expect(raised.log).toBe('raised');
    const quiet = at(raised.state, 2 * hour - 1, 3);
    expect(quiet.log).toBeNull();
    const again = at(quiet.state, 2 * hour, 3);
    expect(again.log).toBe('repeat');
    const after = judgeSilence(again.state, {
      now: 2 * hour + 1,
      lastDeliveryAt: 2 * hour,
      silenceMs: hour,
      inFlight: null,
    });
    expect(after).toEqual({ state: noSilence, silentMs: 1, log: 'cleared' });
  });
});

describe('alarmSpeaksAt: the third failure of a run, then every tenth', () => {
  it.each([
    [1, false],
    [2, false],
    [3, true],
    [4, false],
    [12, false],
    [13, true],
    [23, true],
    [24, false],
    // Below the threshold nothing speaks, whatever the number: without that test, (-7 - 3) % 10
    // is -0, which === 0.
    [0, false],
    [-7, false],
  ])('failure %i: %s', (consecutive, speaks) => {
    expect(alarmSpeaksAt(consecutive)).toBe(speaks);
  });
});

describe('runOfAnswers and runSpeaksSince: the run read back from every replica (cluster mode)', () => {
  const timed = (answers: readonly DeliveryAnswer[], start = 0) =>
    answers.map((answer, i) => ({ answer, at: start + i * 1000 }));

  it.each<[string, DeliveryAnswer[], number]>([
    ['no answers', [], 0],
    ['three failures from three replicas', ['invalid_signature', 'forbidden', 'invalid_signature'], 3],
    ['a 200 in between ends the run', ['invalid_signature', 'accepted', 'invalid_signature'], 1],
    ['a duplicate is a 200 too', ['aborted', 'aborted', 'duplicate'], 0],
  ])('%s', (_name, answers, consecutive) => {
    const folded = runOfAnswers(timed(answers));
    expect(folded.consecutive).toBe(consecutive);
    // The same rule as answering them one by one.
    expect(folded).toEqual(run(answers).state);
  });

  it('goes on from a known run', () => {
    const first = runOfAnswers(timed(['invalid_signature']));
    const next = runOfAnswers(timed(['forbidden'], 5000), first);
    expect(next).toMatchObject({ consecutive: 2, firstFailureAt: 0, lastFailureAt: 5000 });
  });

  it.each<[string, number, number, boolean]>([
    ['nothing new', 3, 3, false],
    ['reaches the third', 2, 3, true],
    ['jumps over the third', 1, 5, true],
    ['grows between speaking points', 3, 12, false],
    ['reaches the thirteenth', 12, 13, true],
  ])('speaks when the same run %s', (_name, seenCount, nowCount, speaks) => {
    const seen = runOfAnswers(timed(Array<DeliveryAnswer>(seenCount).fill('invalid_signature')));
    const now = runOfAnswers(timed(Array<DeliveryAnswer>(nowCount).fill('invalid_signature')));
    expect(runSpeaksSince(seen, now)).toBe(speaks);
  });

  it('counts a new run from zero', () => {
    const old = runOfAnswers(timed(Array<DeliveryAnswer>(5).fill('aborted')));
    const fresh = runOfAnswers(timed(Array<DeliveryAnswer>(3).fill('aborted'), 60_000));
    expect(runSpeaksSince(old, fresh)).toBe(true);
    expect(runSpeaksSince(noFailures, noFailures)).toBe(false);
  });
});
