import {
  initialAlarmState,
  recordSignatureOutcome,
  type SignatureAlarmState,
} from '../../../src/domain/signature-alarm';

function run(outcomes: readonly (boolean | [boolean, number])[]): boolean[] {
  let state: SignatureAlarmState = initialAlarmState;
  return outcomes.map((o, i) => {
    const [rejected, at] = Array.isArray(o) ? o : [o, i * 1000];
    const step = recordSignatureOutcome(state, rejected, at, 60_000);
    state = step.state;
    return step.alarm;
  });
}

describe('recordSignatureOutcome', () => {
  it.each([
    ['two rejections: no alarm', [true, true], [false, false]],
    ['the third consecutive rejection alarms', [true, true, true], [false, false, true]],
    [
      'an accepted delivery resets the run',
      [true, true, false, true, true],
      [false, false, false, false, false],
    ],
    [
      'then again on the 13th',
      Array(13).fill(true),
      [...Array(2).fill(false), true, ...Array(9).fill(false), true],
    ],
    [
      'rejections an hour apart start a new run',
      [
        [true, 0],
        [true, 1000],
        [true, 120_000],
      ],
      [false, false, false],
    ],
  ] as const)('%s', (_name, outcomes, expected) => {
    expect(run(outcomes as never)).toEqual(expected);
  });
});
