import { join } from 'node:path';

import * as Admin from '../../../../src/domain/forwarding/admin';
import { type AttemptRow, type ForwardRow } from '../../../../src/domain/forwarding/admin';
import { parseDestinationsFile } from '../../../../src/domain/forwarding/destinations';
import { loadAgainInEachTest } from '../fresh-module';

// Loaded again in each test, so that Stryker runs these tests against its module-level tables and
// patterns too (fresh-module.ts).
loadAgainInEachTest(Admin, join(__dirname, '../../../../src/domain/forwarding/admin'));
const {
  addReplayCounts,
  destinationSummaries,
  isEmptyFilter,
  isMessageType,
  listLimit,
  parseCircuit,
  parseInstant,
  replayCounts,
  shownForward,
  shownForwardRow,
} = Admin;

/**
 * A delivery as operators see it (admin API, commands, console): every CPF masked, in its message
 * (even for a destination that gets it in full), its last error and its attempts' errors and
 * answers (a destination may echo the body it got) — contract §5. Runs of 12 and 14 digits are not
 * CPFs and stay as they are.
 */

const CPF = '12345678909';
const MASKED = '***.456.789-**';

const row = (last_error: string | null): ForwardRow => ({
  id: 1,
  message_id: 2,
  destination: 'crm',
  status: 'dead',
  attempts: 1,
  next_attempt_at: null,
  last_status: 400,
  last_error,
  created_at: '2026-11-21T10:00:00.000Z',
  updated_at: '2026-11-21T10:00:01.000Z',
  delivered_at: null,
  webhook_id: 'msg_1',
  type: 'proposal.changed',
  event_id: 3,
  evento: 'proposta.criada',
  nu_proposta: 7,
  request_id: null,
  order_key: 'p:7',
  message_created_at: '2026-11-21T10:00:00.000Z',
});

const attempt = (error: string | null, answer: string | null): AttemptRow => ({
  id: 1,
  attempt: 1,
  started_at: '2026-11-21T10:00:00.500Z',
  duration_ms: 12,
  http_status: 400,
  error,
  outcome: 'permanent',
  answer,
});

describe('shownForwardRow: the last error masked', () => {
  it.each<[string | null, string | null]>([
    [null, null],
    [`HTTP 400: cpf ${CPF} recusado`, `HTTP 400: cpf ${MASKED} recusado`],
    ['HTTP 400: cpf 123.456.789-09', `HTTP 400: cpf ${MASKED}`],
    ['HTTP 400: conta 123456789012 cnpj 12345678000195', 'HTTP 400: conta 123456789012 cnpj 12345678000195'],
  ])('%p → %p, the rest as it was', (error, expected) => {
    expect(shownForwardRow(row(error))).toEqual({ ...row(error), last_error: expected });
  });
});

describe('shownForward: the message, the errors and the answers masked', () => {
  const body = JSON.stringify({
    type: 'proposal.changed',
    data: {
      proposal: { nu_cpf: CPF, conta: 123456789012 },
      payload: { dados: { cpf: 98765432100, obs: `cpf ${CPF}`, cnpj: '12345678000195' } },
    },
  });

  it('masks every CPF in the message, whichever key or text holds it', () => {
    const shown = shownForward({ delivery: row(null), body, attempts: [] });
    expect(shown.message).toEqual({
      type: 'proposal.changed',
      data: {
        proposal: { nu_cpf: MASKED, conta: 123456789012 },
        payload: { dados: { cpf: '***.654.321-**', obs: `cpf ${MASKED}`, cnpj: '12345678000195' } },
      },
    });
    expect(JSON.stringify(shown)).not.toContain(CPF);
  });

  it.each<[string | null, string | null, string | null, string | null]>([
    [null, null, null, null],
    [`refused ${CPF}`, body, `refused ${MASKED}`, null],
    [
      'timeout',
      `{"echo":"${CPF}","conta":"123456789012"}`,
      'timeout',
      `{"echo":"${MASKED}","conta":"123456789012"}`,
    ],
  ])('an attempt with error %p and answer %p', (error, answer, shownError, shownAnswer) => {
    const shown = shownForward({ delivery: row(`last ${CPF}`), body, attempts: [attempt(error, answer)] });
    expect(shown.delivery.last_error).toBe(`last ${MASKED}`);
    expect(shown.attempts).toHaveLength(1);
    expect(shown.attempts[0]?.error).toBe(shownError);
    if (shownAnswer !== null) expect(shown.attempts[0]?.answer).toBe(shownAnswer);
    else if (answer !== null) expect(shown.attempts[0]?.answer).not.toContain(CPF);
    else expect(shown.attempts[0]?.answer).toBeNull();
    expect(shown.attempts[0]).toMatchObject({ id: 1, attempt: 1, http_status: 400, outcome: 'permanent' });
  });
});

describe('filters and listings', () => {
  it("the change feed's types when none are asked: what a feed reader follows, erasures included", () => {
    expect(Admin.FEED_DEFAULT_TYPES).toEqual(['proposal.changed', 'averbacao.result', 'subject.erased']);
  });

  it.each<[Parameters<typeof isEmptyFilter>[0], boolean]>([
    [{}, true],
    [{ destination: '', status: undefined, nuProposta: '', since: '', until: '' }, true],
    [{ destination: 'crm' }, false],
    [{ status: 'dead' }, false],
    [{ nuProposta: 7 }, false],
    [{ nuProposta: 0 }, false],
    [{ since: '2026-11-21' }, false],
    [{ until: '2026-11-21' }, false],
  ])('isEmptyFilter(%j) → %p', (filter, empty) => {
    expect(isEmptyFilter(filter)).toBe(empty);
  });

  it.each<[number | undefined, number]>([
    [undefined, 50],
    [0, 1],
    [-5, 1],
    [1, 1],
    [1000, 1000],
    [1001, 1000],
    [20, 20],
  ])('listLimit(limit %p) → %p', (limit, expected) => {
    expect(listLimit({ limit })).toBe(expected);
  });

  it.each<[string, string | null]>([
    ['2026-11-21', '2026-11-21T00:00:00.000Z'],
    ['2026-11-21T10:00Z', '2026-11-21T10:00:00.000Z'],
    ['2026-11-21T10:00:00-03:00', '2026-11-21T13:00:00.000Z'],
    ['2026-11-21T10:00:00.5+01:00', '2026-11-21T09:00:00.500Z'],
    ['2026-11-21T10:00:00', null], // no zone: it would mean the server's
    ['2026-02-30', null], // does not exist
    ['2026-13-01', null],
    ['2026-11-31', null],
    ['2024-02-29', '2024-02-29T00:00:00.000Z'],
    ['2026-00-10', null],
    ['0050-01-01', '0050-01-01T00:00:00.000Z'], // not 1950: Date.UTC's reading of years 0-99
    ['0050-02-29', null],
    ['0000-02-29', '0000-02-29T00:00:00.000Z'], // year 0 is a leap year; 1900 is not
    ['x2026-11-21', null],
    // Date.parse reads these, the pattern does not.
    ['Sat 2026-11-21', null],
    [' 2026-11-21', null],
    ['2026-11-21T10:00:00.123456789Z', '2026-11-21T10:00:00.123Z'],
    ['2026-11-21x', null],
    ['21/11/2026', null],
    ['', null],
  ])('parseInstant(%p) → %p', (text, expected) => {
    expect(parseInstant(text)).toBe(expected);
  });

  it.each([
    ['event.received', true],
    ['proposal.changed', true],
    ['averbacao.result', true],
    ['proposal', false],
    ['', false],
  ])('isMessageType(%p) → %p', (value, expected) => {
    expect(isMessageType(value)).toBe(expected);
  });
});

describe('replays', () => {
  it('counts by the status each delivery had; any other status counts in the total only', () => {
    const counts = replayCounts([
      { status: 'pending', n: 2 },
      { status: 'delivered', n: 3 },
      { status: 'dead', n: 4 },
      { status: 'other', n: 1 },
    ]);
    expect(counts).toEqual({ replayed: 10, by_status: { pending: 2, delivered: 3, dead: 4 } });
    expect(replayCounts([])).toEqual({ replayed: 0, by_status: { pending: 0, delivered: 0, dead: 0 } });
  });

  it('adds a chunk to the running total', () => {
    const total = replayCounts([{ status: 'dead', n: 1 }]);
    addReplayCounts(total, { replayed: 9, by_status: { pending: 2, delivered: 3, dead: 4 } });
    expect(total).toEqual({ replayed: 10, by_status: { pending: 2, delivered: 3, dead: 5 } });
  });
});

describe('destinationSummaries', () => {
  const configured = parseDestinationsFile(
    JSON.stringify({
      destinations: [
        {
          name: 'warehouse',
          url: 'https://dw.example/in?token=s3cr3t',
          secret: 'dw-secret-0123',
          full_cpf: true,
          types: ['proposal.changed'],
        },
        {
          name: 'crm',
          url: 'https://crm.example/hook',
          secret: 'crm-secret-0123',
          paused: true,
          filter: { 'data.applied': true },
        },
      ],
    }),
    'test',
  );

  it('configured destinations first, in their order, then every other name met, by name; each with its figures', () => {
    const open = JSON.stringify({ state: 'open', failures: 5, until: 1 });
    const summaries = destinationSummaries(
      configured,
      [
        { name: 'zeta', paused: 0, circuit: null },
        { name: 'warehouse', paused: 1, circuit: open },
      ],
      [
        { destination: 'warehouse', status: 'pending', n: 4 },
        { destination: 'warehouse', status: 'retrying', n: 1 },
        { destination: 'warehouse', status: 'dead', n: 2 },
        { destination: 'alpha', status: 'delivered', n: 7 },
      ],
      (name) => (name === 'warehouse' ? '2026-11-21T10:00:00.000Z' : null),
    );
    expect(summaries.map((s) => s.name)).toEqual(['warehouse', 'crm', 'alpha', 'zeta']);
    expect(summaries[0]).toEqual({
      name: 'warehouse',
      configured: true,
      url: 'https://dw.example/in?…',
      types: ['proposal.changed'],
      eventos: expect.any(Array),
      has_filter: false,
      full_cpf: true,
      paused: true,
      paused_in_config: false,
      paused_by_operator: true,
      counts: { pending: 4, retrying: 1, delivered: 0, dead: 2 },
      oldest_pending_at: '2026-11-21T10:00:00.000Z',
      circuit: { state: 'open', failures: 5, until: 1 },
    });
    expect(summaries[1]).toMatchObject({
      name: 'crm',
      configured: true,
      url: 'https://crm.example/hook',
      has_filter: true,
      full_cpf: false,
      paused: true,
      paused_in_config: true,
      paused_by_operator: false,
      counts: { pending: 0, retrying: 0, delivered: 0, dead: 0 },
      oldest_pending_at: null,
      circuit: { state: 'closed', failures: 0 },
    });
    expect(summaries[2]).toEqual({
      name: 'alpha',
      configured: false,
      url: null,
      types: null,
      eventos: null,
      has_filter: null,
      full_cpf: null,
      paused: false,
      paused_in_config: false,
      paused_by_operator: false,
      counts: { pending: 0, retrying: 0, delivered: 7, dead: 0 },
      oldest_pending_at: null,
      circuit: { state: 'closed', failures: 0 },
    });
  });

  it.each<[string | null, unknown]>([
    [null, { state: 'closed', failures: 0 }],
    ['not json', { state: 'closed', failures: 0 }],
    ['{"state":"bogus"}', { state: 'closed', failures: 0 }],
    ['{"failures":3}', { state: 'closed', failures: 0 }],
    ['{"state":"half_open","failures":5}', { state: 'half_open', failures: 5 }],
    ['{"state":"closed","failures":2}', { state: 'closed', failures: 2 }],
    ['{"state":"open","failures":5,"until":9}', { state: 'open', failures: 5, until: 9 }],
  ])('parseCircuit(%p) → %j', (text, expected) => {
    expect(parseCircuit(text)).toEqual(expected);
  });
});
