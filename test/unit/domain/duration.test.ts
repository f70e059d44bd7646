import { join } from 'node:path';

import * as Duration from '../../../src/domain/duration';
import { loadAgainInEachTest } from './fresh-module';

// Loaded again in each test, so that Stryker runs these tests against its module-level tables and
// patterns too (fresh-module.ts).
loadAgainInEachTest(Duration, join(__dirname, '../../../src/domain/duration'));
const { formatAge, formatDuration, parseDuration } = Duration;

// Rows for the survivors of issue 37's mutation run (a spaced value, a zero duration), with the
// grammar around them.
describe('parseDuration', () => {
  it.each<[string, number | null]>([
    ['90m', 90 * 60_000],
    ['36h', 36 * 3_600_000],
    ['5d', 5 * 86_400_000],
    ['5D', 5 * 86_400_000],
    [' 5d ', 5 * 86_400_000],
    ['\t36h\n', 36 * 3_600_000],
    ['0m', null],
    ['90', null],
    ['5 d', null],
    ['1.5h', null],
    ['5mx', null],
    ['x5m', null],
    ['-5d', null],
    ['12345678m', null],
    ['', null],
  ])('%j → %s', (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });
});

describe('formatDuration', () => {
  it.each<[number, string]>([
    [2 * 86_400_000, '2d'],
    [36 * 3_600_000, '36h'],
    [90 * 60_000, '90m'],
    [0, '0m'],
    [-86_400_000, '-1440m'],
    [-3_600_000, '-60m'],
    [90_000, '2m'],
  ])('%d → %s', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });
});

describe('formatAge', () => {
  it.each<[number, string]>([
    [-5000, '0 s'],
    [59_999, '59 s'],
    [60_000, '1 min'],
    [3_600_000, '1 h'],
    [3_900_000, '1 h 5 min'],
    [48 * 3_600_000, '2 d'],
    [52 * 3_600_000, '2 d 4 h'],
  ])('%d → %s', (ms, text) => {
    expect(formatAge(ms)).toBe(text);
  });
});
