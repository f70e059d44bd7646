import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as Dialects from '../../../src/domain/sql/dialect';
import type { Dialect } from '../../../src/domain/sql/dialect';
import { loadAgainInEachTest } from './fresh-module';

// Loaded again in each test: the dialects are object literals built when the module loads, so
// that only so does Stryker run these tests against their members (fresh-module.ts).
loadAgainInEachTest(Dialects, join(__dirname, '../../../src/domain/sql/dialect'));

/**
 * Each store's dialect (domain/sql/dialect.ts): every primitive pinned, SQLite's beside
 * PostgreSQL's. The statements they end up in run against both real databases in
 * test/integration/store-conformance.test.ts; this table says what each store is given.
 */

type Case = [member: string, of: (d: Dialect) => unknown, sqlite: unknown, postgres: unknown];

const KEY = { updated_at: '2026-11-26T12:00:00.000Z', nu_proposta: 4242 };
const TEXT_KEY = { updated_at: '2026-11-26T12:00:00.000Z', nu_proposta: 'A-7' };

const cases: Case[] = [
  ['name', (d) => d.name, 'sqlite', 'postgres'],
  ['instant', (d) => d.instant('$3'), '$3', '$3::timestamptz'],
  [
    'inIds',
    (d) => d.inIds('d.id', '$1'),
    'd.id IN (SELECT value FROM json_each($1))',
    'd.id = ANY($1::bigint[])',
  ],
  ['idList', (d) => d.idList([3, 1, 2]), '[3,1,2]', [3, 1, 2]],
  ['idList (none)', (d) => d.idList([]), '[]', []],
  [
    'names.table',
    (d) => d.names.table('$1'),
    '(SELECT value AS name, key AS ord FROM json_each($1)) AS n',
    'unnest($1::text[]) WITH ORDINALITY AS n(name, ord)',
  ],
  ['names.param', (d) => d.names.param(['b', 'a']), '["b","a"]', ['b', 'a']],
  [
    'batch',
    (d) => {
      const b = d.batch([
        ['id', 'bigint'],
        ['at', 'timestamptz'],
      ]);
      return [b.col('id'), b.col('at'), b.from.replace(/\s+/g, ' ')];
    },
    ['$1', '$2', ''],
    ['u.id', 'u.at', 'FROM unnest($1::bigint[], $2::timestamptz[]) AS u(id, at)'],
  ],
  [
    'batchParams',
    (d) =>
      d.batchParams(
        [
          { a: 1, b: 'x' },
          { a: 2, b: 'y' },
        ],
        (r) => [r.a, r.b],
      ),
    [
      [1, 'x'],
      [2, 'y'],
    ],
    [
      [
        [1, 2],
        ['x', 'y'],
      ],
    ],
  ],
  ['batchParams (no rows)', (d) => d.batchParams([], () => []), [], []],
  ['text', (d) => d.text('a\u0000b'), 'a\u0000b', 'ab'],
  ['text (null)', (d) => d.text(null), null, null],
  ['body', (d) => d.body('{"a":"é"}'), '{"a":"é"}', Buffer.from('{"a":"é"}', 'utf8')],
  ['bytewise', (d) => d.bytewise('status'), 'status', 'status COLLATE "C"'],
  ['unindexed', (d) => d.unindexed('outcome'), '+outcome', 'outcome'],
  [
    'utcHour',
    (d) => d.utcHour('received_at'),
    'substr(received_at, 1, 13)',
    `to_char(received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24')`,
  ],
  [
    'jsonLeaf (a string)',
    (d) => d.jsonLeaf({ path: '$."a"."b"', keys: ['a', 'b'], value: 'x' }),
    {
      condition: `CASE WHEN typeof(e.body) = 'text' AND json_valid(e.body) THEN json_extract(e.body, ?) END = ?`,
      values: ['$."a"."b"', 'x'],
    },
    { condition: 'console_body_json(e.body) #> ?::text[] = ?::jsonb', values: [['a', 'b'], '"x"'] },
  ],
  [
    'jsonLeaf (null: its JSON type)',
    (d) => d.jsonLeaf({ path: '$."gone"', keys: ['gone'], value: null }),
    {
      condition: `CASE WHEN typeof(e.body) = 'text' AND json_valid(e.body) THEN json_type(e.body, ?) END = ?`,
      values: ['$."gone"', 'null'],
    },
    { condition: 'console_body_json(e.body) #> ?::text[] = ?::jsonb', values: [['gone'], 'null'] },
  ],
  [
    'jsonLeaf (a boolean: its JSON type)',
    (d) => d.jsonLeaf({ path: '$."ok"', keys: ['ok'], value: true }),
    {
      condition: `CASE WHEN typeof(e.body) = 'text' AND json_valid(e.body) THEN json_type(e.body, ?) END = ?`,
      values: ['$."ok"', 'true'],
    },
    { condition: 'console_body_json(e.body) #> ?::text[] = ?::jsonb', values: [['ok'], 'true'] },
  ],
  [
    'proposalOrder.keys',
    (d) => d.proposalOrder.keys,
    ['nu_proposta'],
    [
      "(nu_proposta !~ '^(0|[1-9][0-9]{0,14})$')",
      "(CASE WHEN nu_proposta ~ '^(0|[1-9][0-9]{0,14})$' THEN length(nu_proposta) ELSE 0 END)",
      'nu_proposta COLLATE "C"',
    ],
  ],
  [
    'proposalOrder.bound (an integer)',
    (d) => d.proposalOrder.bound(KEY, 3),
    { sql: '($3, $4)', params: [KEY.updated_at, 4242] },
    { sql: '($3::timestamptz, $4::boolean, $5::int, $6::text)', params: [KEY.updated_at, false, 4, '4242'] },
  ],
  [
    'proposalOrder.bound (text)',
    (d) => d.proposalOrder.bound(TEXT_KEY, 1),
    { sql: '($1, $2)', params: [TEXT_KEY.updated_at, 'A-7'] },
    {
      sql: '($1::timestamptz, $2::boolean, $3::int, $4::text)',
      params: [TEXT_KEY.updated_at, true, 0, 'A-7'],
    },
  ],
  ['storedNu', (d) => [d.storedNu(4242), d.storedNu('A-7')], [4242, 'A-7'], ['4242', 'A-7']],
  [
    'logNu',
    (d) => [d.logNu('4242'), d.logNu('0042'), d.logNu(7), d.logNu(null)],
    ['4242', '0042', 7, null],
    [4242, '0042', 7, null],
  ],
  [
    'raw',
    (d) => [
      d.raw.nu('4242'),
      d.raw.flag(true),
      d.raw.flag(1),
      d.raw.flag(false),
      d.raw.flag(0),
      d.raw.amount('12.5'),
    ],
    ['4242', 0, 1, 0, 0, '12.5'],
    [4242, 1, 1, 0, 0, 12.5],
  ],
  ['raw.amount (null)', (d) => d.raw.amount(null), null, null],
  [
    // An integer only in its canonical decimal, of at most 15 digits (a safe integer).
    'raw.nu (text that is no canonical integer)',
    (d) =>
      ['-7', '0042', '-0', '12x', 'x12', '1 2', '123456789012345', '1234567890123456'].map((v) =>
        d.raw.nu(v),
      ),
    ['-7', '0042', '-0', '12x', 'x12', '1 2', '123456789012345', '1234567890123456'],
    [-7, '0042', '-0', '12x', 'x12', '1 2', 123456789012345, '1234567890123456'],
  ],
  [
    'raw.instant',
    (d) => d.raw.instant('2026-11-26T12:00:00.000Z'),
    '2026-11-26T12:00:00.000Z',
    '2026-11-26T12:00:00.000Z',
  ],
  [
    'raw.instant (a Date, as node-postgres gives a timestamptz)',
    (d) => (d.name === 'postgres' ? d.raw.instant(new Date('2026-11-26T12:00:00.000Z')) : null),
    null,
    '2026-11-26T12:00:00.000Z',
  ],
  [
    'rowLock',
    (d) => [d.rowLock('UPDATE'), d.rowLock('UPDATE OF d'), d.rowLock('NO KEY UPDATE SKIP LOCKED')],
    ['', '', ''],
    [' FOR UPDATE', ' FOR UPDATE OF d', ' FOR NO KEY UPDATE SKIP LOCKED'],
  ],
  [
    'transactionLock',
    (d) => d.transactionLock(0x10n, '2s'),
    [],
    [
      { text: `SET LOCAL lock_timeout = '2s'`, params: [] },
      { text: 'SELECT pg_advisory_xact_lock($1)', params: ['16'] },
    ],
  ],
  ['trackingOrder', (d) => d.trackingOrder, 'rowid', 'seq'],
  ['idsFollowArrival', (d) => d.idsFollowArrival, true, false],
  ['writingWith', (d) => d.writingWith, false, true],
  ['relaysSpools', (d) => d.relaysSpools, false, true],
  [
    'retentionBatch',
    (d) => d.retentionBatch,
    { bodies: 2000, messages: 500, proposals: 500 },
    { bodies: 1000, messages: 250, proposals: 250 },
  ],
];

describe('each dialect', () => {
  it.each(cases)('%s', (_member, of, sqlite, postgres) => {
    const { sqliteDialect, postgresDialect } = Dialects;
    expect(of(sqliteDialect)).toEqual(sqlite);
    expect(of(postgresDialect)).toEqual(postgres);
  });

  it('has every member pinned above, and both the same members', () => {
    const { sqliteDialect, postgresDialect } = Dialects;
    const pinned = new Set(cases.map(([member]) => member.split(/[ .]/)[0]));
    expect(Object.keys(sqliteDialect).sort()).toEqual(Object.keys(postgresDialect).sort());
    expect([...pinned].sort()).toEqual(Object.keys(sqliteDialect).sort());
  });
});

describe('perDialect', () => {
  it('builds once per dialect, and apart for each', () => {
    const { perDialect, sqliteDialect, postgresDialect } = Dialects;
    let built = 0;
    const of = perDialect((d) => ({ built: ++built, name: d.name }));
    expect(of(sqliteDialect)).toBe(of(sqliteDialect));
    expect(of(postgresDialect)).toEqual({ built: 2, name: 'postgres' });
    expect(built).toBe(2);
  });
});

/** The TypeScript files under `dir`, recursively. */
function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

describe('the code written once for both stores', () => {
  // The check (`grep -rnE "dialect\s*[!=]==" src/core src/domain`), and the store's name
  // taken apart from its dialect: the primitives are the dialect's members, never a branch on which.
  it('never asks which store it runs on', () => {
    const root = join(__dirname, '../../../src');
    const files = [...sources(join(root, 'core')), ...sources(join(root, 'domain'))].filter(
      (f) => !f.endsWith(join('domain', 'sql', 'dialect.ts')),
    );
    expect(files.length).toBeGreaterThan(20);
    const found = files.flatMap((f) =>
      readFileSync(f, 'utf8')
        .split('\n')
        .flatMap((line, i) =>
          /dialect\s*[!=]==|dialect\.name\b|[!=]==\s*'(sqlite|postgres)'|\[\w*\.?dialect\]/i.test(line)
            ? [`${f}:${i + 1}: ${line.trim()}`]
            : [],
        ),
    );
    expect(found).toEqual([]);
  });
});
