import {
  ConfigError,
  ConsigError,
  DatabaseFileError,
  isLockBusy,
  MigrationError,
  StorageError,
  UsageError,
} from '../../../src/domain/errors';
import {
  deliveryLastError,
  STORED_ERROR_CHARS,
  storedError,
} from '../../../src/domain/forwarding/sender-store';
import { clampLimit } from '../../../src/domain/list-limit';
import { logNuProposta, parseNuProposta } from '../../../src/domain/log-rows';
import { isBeforeCutoff } from '../../../src/domain/retention';
import { sharedWorkKeyOf, workKeyOf } from '../../../src/domain/work-key';

/** Small rules both stores apply, each a line or two: their edges, one row each. */

describe('isLockBusy: another connection holds the lock', () => {
  it.each<[unknown, boolean]>([
    [{ code: 'SQLITE_BUSY' }, true],
    [{ code: 'SQLITE_LOCKED' }, true],
    [{ code: 'SQLITE_BUSY_SNAPSHOT' }, true],
    [{ code: '55P03' }, true],
    [{ code: '55P031' }, false],
    [{ code: 'X55P03' }, false],
    [{ code: 'XSQLITE_BUSY' }, false],
    [{ code: 'SQLITE_FULL' }, false],
    [{ code: '40001' }, false],
    [new Error('SQLITE_BUSY'), false],
    [null, false],
    [undefined, false],
  ])('%p → %p', (err, busy) => {
    expect(isLockBusy(err)).toBe(busy);
  });
});

describe('clampLimit', () => {
  it.each<[number | undefined, number | undefined, number]>([
    [undefined, undefined, 50],
    [undefined, 7, 7],
    [0, undefined, 1],
    [-3, undefined, 1],
    [1, undefined, 1],
    [200, undefined, 200],
    [10_000, undefined, 10_000],
    [10_001, undefined, 10_000],
  ])('limit %p (fallback %p) → %p', (limit, fallback, expected) => {
    expect(clampLimit(limit, fallback)).toBe(expected);
  });
});

describe('an attempt error as stored', () => {
  const long = 'x'.repeat(STORED_ERROR_CHARS + 5);
  it.each<[string | null, number | null, 'delivered' | 'pending' | 'dead', string | null, string | null]>([
    [null, 200, 'delivered', null, null],
    ['timeout', null, 'delivered', 'timeout', null],
    ['timeout', null, 'pending', 'timeout', 'timeout'],
    [null, 503, 'pending', null, 'HTTP 503'],
    [null, 400, 'dead', null, 'HTTP 400'],
    [long, null, 'dead', long.slice(0, STORED_ERROR_CHARS), long.slice(0, STORED_ERROR_CHARS)],
  ])('error %p, HTTP %p, then %p: stored %p, last_error %p', (error, httpStatus, status, stored, last) => {
    expect(storedError({ error })).toBe(stored);
    expect(deliveryLastError({ error, httpStatus, next: { status } as never })).toBe(last);
  });
});

describe('logNuProposta: an integer as a number, anything else as the text', () => {
  it.each<[string | null, number | string | null]>([
    [null, null],
    ['42', 42],
    ['0', 0],
    ['ABC-1', 'ABC-1'],
    ['4a', '4a'],
  ])('%p → %p', (value, expected) => {
    expect(logNuProposta(value)).toBe(expected);
  });
});

describe('parseNuProposta: a number typed by a person, read as a delivery reads it', () => {
  it.each<[string, number | string]>([
    ['42', 42],
    [' 42 ', 42],
    ['42abc', '42abc'],
    [' ABC-1 ', 'ABC-1'],
    ['1234567890123456', '1234567890123456'],
    ['   ', ''],
  ])('%p → %p', (value, expected) => {
    expect(parseNuProposta(value)).toBe(expected);
  });
});

describe('work keys: the proposal, then the registration, then the event', () => {
  it.each<[number | string | null | undefined, string | null | undefined, string | null]>([
    [42, 'req-1', 'p:42'],
    ['ABC-9', undefined, 'p:ABC-9'],
    [0, null, 'p:0'],
    [null, 'req-1', 'r:req-1'],
    [undefined, 'req-1', 'r:req-1'],
    [null, null, null],
    [undefined, undefined, null],
  ])('nu %p, request %p: shared %p', (nu, requestId, shared) => {
    const parts = { nu_proposta: nu, request_id: requestId };
    expect(sharedWorkKeyOf(parts)).toBe(shared);
    expect(workKeyOf({ ...parts, id: 7 })).toBe(shared ?? 'e:7');
  });
});

describe('isBeforeCutoff', () => {
  it.each<[string, boolean]>([
    ['2026-11-20T23:59:59.999Z', true],
    ['2026-11-21T00:00:00.000Z', false],
    ['2026-11-21T00:00:00.001Z', false],
  ])('%s before 2026-11-21T00:00:00.000Z: %p', (at, before) => {
    expect(isBeforeCutoff(at, '2026-11-21T00:00:00.000Z')).toBe(before);
  });
});

// The stable codes callers and logs branch on (issue 37: three of them were never read by a test).
describe('the errors raised on purpose: each one its code, its message, its class', () => {
  it.each<[string, () => ConsigError, string, string]>([
    [
      'ConfigError',
      () => new ConfigError('PORT', 'expected a port'),
      'CONFIG_INVALID',
      'PORT: expected a port',
    ],
    ['StorageError', () => new StorageError('database away'), 'STORAGE_UNAVAILABLE', 'database away'],
    [
      'DatabaseFileError',
      () => new DatabaseFileError('/x/consig.db', 'not writable'),
      'STORAGE_UNAVAILABLE',
      'not writable',
    ],
    ['MigrationError', () => new MigrationError('0007 failed'), 'MIGRATION_FAILED', '0007 failed'],
    ['UsageError', () => new UsageError('unknown command'), 'USAGE', 'unknown command'],
  ])('%s', (name, make, code, message) => {
    // Made inside the test, not in the table: an error built while jest collects the tests is built
    // before Stryker's mutant is switched on (the code's mutant survived).
    const err = make();
    expect(err).toBeInstanceOf(ConsigError);
    expect(err.name).toBe(name);
    expect(err.code).toBe(code);
    expect(err.message).toBe(message);
  });
});
