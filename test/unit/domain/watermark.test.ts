import {
  clockOffsetMs,
  coveredThrough,
  liveSinceAfterBeat,
  readyForTraffic,
  type RelayBeat,
  watermarkOf,
} from '../../../src/domain/watermark';

const NOW = Date.parse('2026-11-25T12:00:00.000Z');
const at = (ms: number) => new Date(NOW + ms);
const MAX = 5000;

/** A spool heard from `silentMs` ago, live for `liveMs` before that beat, covered through `covered` ms from NOW. */
function beat(spool: string, covered: number, silentMs: number, liveMs = 60_000): RelayBeat {
  return {
    spool,
    replica: `replica-${spool}`,
    coveredThrough: at(covered),
    heartbeatAt: at(-silentMs),
    liveSince: at(-silentMs - liveMs),
  };
}

describe('watermarkOf', () => {
  it.each<[string, RelayBeat[], number | null, string[], string[]]>([
    ['no spool has relayed: nothing to wait for', [], null, [], []],
    ['one live spool: its own cover', [beat('a', -30, 10)], -30, [], []],
    [
      'the lowest of the live spools',
      [beat('a', -30, 10), beat('b', -120, 50), beat('c', -5, 90)],
      -120,
      [],
      [],
    ],
    [
      'a spool silent for less than the max still holds it',
      [beat('a', -30, 10), beat('b', -4000, 4999)],
      -4000,
      [],
      [],
    ],
    ['at exactly the max it is still fresh', [beat('a', -30, 10), beat('b', -5000, MAX)], -5000, [], []],
    [
      'silent beyond the max while another spool is live: dropped',
      [beat('a', -30, 10), beat('b', -9000, MAX + 1)],
      -30,
      [],
      ['b'],
    ],
    [
      'after an outage: the first relay back (live for less than the max) drops nobody',
      [beat('a', -30, 10, 2000), beat('b', -90_000, 87_000), beat('c', -88_000, 86_000)],
      -90_000,
      ['b', 'c'],
      [],
    ],
    [
      'once a relay has been back for the max, the silent ones are dropped',
      [beat('a', -30, 10, MAX), beat('b', -90_000, 87_000)],
      -30,
      [],
      ['b'],
    ],
    // The "settled" boundary: live for exactly the max (heard from just now) settles it.
    [
      'a relay live for exactly the max: the silent ones are dropped',
      [beat('a', -30, 0, MAX), beat('b', -90_000, 87_000)],
      -30,
      [],
      ['b'],
    ],
    [
      'a relay live for a millisecond less than the max: nobody dropped yet',
      [beat('a', -30, 0, MAX - 1), beat('b', -90_000, 87_000)],
      -90_000,
      ['b'],
      [],
    ],
    [
      'every spool silent (PostgreSQL was away): all still count',
      [beat('a', -70_000, 60_000), beat('b', -80_000, 61_000)],
      -80_000,
      ['a', 'b'],
      [],
    ],
    [
      'a spool of a replaced volume, silent for a day, does not hold a live cluster back',
      [beat('old', -86_400_000, 86_400_000), beat('a', -20, 30), beat('b', -40, 60)],
      -40,
      [],
      ['old'],
    ],
    [
      'a spool whose clock is behind holds the watermark back by its skew',
      [beat('a', -30, 10), beat('behind', -2030, 10)],
      -2030,
      [],
      [],
    ],
  ])('%s', (_name, beats, expected, waiting, dropped) => {
    const w = watermarkOf(beats, at(0), MAX);
    expect(w.at === null ? null : w.at.getTime() - NOW).toBe(expected);
    expect(w.waiting).toEqual(waiting);
    expect(w.dropped).toEqual(dropped);
  });
});

describe('liveSinceAfterBeat', () => {
  it.each<[string, { heartbeatAt: Date; liveSince: Date } | null, number]>([
    ['first beat: now', null, 0],
    ['a beat within the max: the run goes on', { heartbeatAt: at(-100), liveSince: at(-60_000) }, -60_000],
    ['at exactly the max: goes on', { heartbeatAt: at(-MAX), liveSince: at(-60_000) }, -60_000],
    ['after a longer silence: a new run', { heartbeatAt: at(-MAX - 1), liveSince: at(-60_000) }, 0],
  ])('%s', (_name, previous, expected) => {
    expect(liveSinceAfterBeat(previous, at(0), MAX).getTime() - NOW).toBe(expected);
  });
});

describe('coveredThrough', () => {
  const iso = (ms: number) => at(ms).toISOString();
  it.each<[string, string | null, string | null, number]>([
    ['nothing pending: the relay’s clock', null, null, 0],
    ['the oldest unrelayed delivery', iso(-300), null, -300],
    ['a request in flight older than the spool’s backlog', iso(-300), iso(-900), -900],
    ['never after the relay’s clock', iso(50), null, 0],
    ['a request open longer than the max holds it back by the max only', null, iso(-60_000), -MAX],
    ['but an older unrelayed delivery still does', iso(-70_000), iso(-60_000), -70_000],
  ])('%s', (_name, unrelayed, inFlight, expected) => {
    expect(coveredThrough(at(0), unrelayed, inFlight, MAX).getTime() - NOW).toBe(expected);
  });
});

describe('clockOffsetMs', () => {
  it.each<[string, number, number, number, number]>([
    ['clocks in sync, 4 ms round trip', 0, 2, 4, 0],
    ['replica 250 ms ahead', 250, 2, 254, 250],
    ['replica 40 ms behind, 10 ms round trip', -40, 5, -30, -40],
  ])('%s', (_name, sent, pg, received, expected) => {
    // sent and received on the replica's clock, pg on PostgreSQL's (ms from NOW).
    expect(clockOffsetMs(at(sent), at(pg), at(received))).toBe(expected);
  });
});

describe('readyForTraffic', () => {
  it.each<[string, boolean, number, boolean]>([
    ['just started, no heartbeat yet: not ready (the others would not wait for it)', false, 0, false],
    ['no heartbeat, just under the bound', false, MAX - 1, false],
    ['no heartbeat at the bound (PostgreSQL away): ready, to take the service deliveries', false, MAX, true],
    ['beaten at once', true, 0, true],
    ['beaten long ago', true, 10 * MAX, true],
  ])('%s', (_name, beaten, sinceStartMs, ready) => {
    expect(readyForTraffic({ beaten, sinceStartMs, maxMs: MAX })).toBe(ready);
  });
});
