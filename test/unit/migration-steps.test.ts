import { MigrationError } from '../../src/domain/errors';
import {
  isLockConflict,
  migrationMode,
  migrationRetryDelayMs,
  outsideStatement,
} from '../../src/domain/migration-steps';

const file = (sql: string) => ({ version: 13, name: 'probe', sql });

describe('migrationMode: the second line', () => {
  it.each([
    ['-- compat: previous\n-- migrate: outside-transaction\nCREATE …', 'outside-transaction'],
    ['-- compat: previous\r\n-- migrate: outside-transaction\r\nCREATE …', 'outside-transaction'],
    ['-- compat: previous\n-- migrate: outside-transaction \t\nCREATE …', 'outside-transaction'],
    ['-- compat: previous\n-- migrate: outside-transaction', 'outside-transaction'],
    // Anywhere else, or another spelling, it is a comment: the file runs in a transaction.
    ['-- migrate: outside-transaction\n-- compat: previous\nCREATE …', 'transaction'],
    ['-- compat: previous\n\n-- migrate: outside-transaction\nCREATE …', 'transaction'],
    ['-- compat: previous\n-- migrate: outside-transaction, please\nCREATE …', 'transaction'],
    ['-- compat: previous\n -- migrate: outside-transaction\nCREATE …', 'transaction'],
    ['-- compat: previous\n-- migrate: outside transaction\nCREATE …', 'transaction'],
    ['-- compat: previous', 'transaction'],
    ['', 'transaction'],
  ])('%j → %s', (sql, mode) => {
    expect(migrationMode(sql)).toBe(mode);
  });
});

describe('outsideStatement', () => {
  it.each([
    [
      '-- compat: previous\n-- migrate: outside-transaction\n-- why\nCREATE INDEX CONCURRENTLY IF NOT EXISTS events_x ON events (id);\n',
      'CREATE INDEX CONCURRENTLY IF NOT EXISTS events_x ON events (id)',
      'events_x',
    ],
    [
      'create unique index concurrently if not exists Events_X on events (id)',
      'create unique index concurrently if not exists Events_X on events (id)',
      'events_x',
    ],
    [
      'CREATE INDEX CONCURRENTLY IF NOT EXISTS "Events_X" ON events (id);  ',
      'CREATE INDEX CONCURRENTLY IF NOT EXISTS "Events_X" ON events (id)',
      'Events_X',
    ],
    [
      'CREATE\n  INDEX  CONCURRENTLY\tIF NOT EXISTS events_x\n  ON events (id);',
      'CREATE\n  INDEX  CONCURRENTLY\tIF NOT EXISTS events_x\n  ON events (id)',
      'events_x',
    ],
    ['DROP INDEX CONCURRENTLY IF EXISTS events_x;', 'DROP INDEX CONCURRENTLY IF EXISTS events_x', null],
    ['  -- only a note\nVACUUM events', 'VACUUM events', null],
    ['\n\nVACUUM events ;\n\n', 'VACUUM events', null],
  ])('%j', (sql, statement, index) => {
    expect(outsideStatement(file(sql))).toEqual({ statement, index });
  });

  it.each([
    [
      'CREATE INDEX CONCURRENTLY IF NOT EXISTS a ON e (id); CREATE INDEX CONCURRENTLY IF NOT EXISTS b ON e (id);',
      /exactly one statement/,
    ],
    ['CREATE INDEX CONCURRENTLY IF NOT EXISTS a ON e (id);;', /exactly one statement/],
    // A `;` inside, none at the end: still two statements.
    ['CREATE INDEX CONCURRENTLY IF NOT EXISTS a ON e (id); VACUUM e', /exactly one statement/],
    ['-- compat: previous\n-- migrate: outside-transaction\n', /exactly one statement/],
    [';', /exactly one statement/],
    ['CREATE INDEX CONCURRENTLY a ON e (id)', /CONCURRENTLY IF NOT EXISTS <name>/],
    ['CREATE INDEX IF NOT EXISTS a ON e (id)', /CONCURRENTLY IF NOT EXISTS <name>/],
    ['create unique index a on e (id)', /CONCURRENTLY IF NOT EXISTS <name>/],
  ])('refuses %j', (sql, message) => {
    expect(() => outsideStatement(file(sql))).toThrow(MigrationError);
    expect(() => outsideStatement(file(sql))).toThrow(message);
    expect(() => outsideStatement(file(sql))).toThrow(/migrations-pg\/0013_probe\.sql/);
  });
});

describe('isLockConflict', () => {
  it.each([
    ['55P03', true],
    ['40P01', true],
    ['57014', false],
    ['23505', false],
    [undefined, false],
    [55, false],
  ])('%j → %s', (code, conflict) => {
    expect(isLockConflict(code)).toBe(conflict);
  });
});

describe('migrationRetryDelayMs', () => {
  it.each([
    [1, 0, 250],
    [1, 1, 500],
    [2, 1, 1000],
    [5, 1, 8000],
    [6, 1, 15_000],
    [40, 0, 7500],
    [40, 1, 15_000],
  ])('attempt %d, random %d → %d ms', (attempt, random, delay) => {
    expect(migrationRetryDelayMs(attempt, () => random)).toBe(delay);
  });
});
