import { handlerFailure } from '../../../src/domain/handler-failure';

const now = new Date('2026-01-02T03:04:05.000Z');
const event = { id: 7, evento: 'proposta.aprovada', nuProposta: 4242 };
const base = { maxAttempts: 3, backoff: { baseMs: 1000, maxMs: 4000 }, random: () => 1, now, event };

describe('handlerFailure: what a failing handler does, in both modes', () => {
  it.each([
    // attempts before, status, outcome, next attempt (random 1: the full backoff)
    [0, 'failed', 'retry', '2026-01-02T03:04:06.000Z'],
    [1, 'failed', 'retry', '2026-01-02T03:04:07.000Z'],
    [2, 'dead', 'dead', null],
    [9, 'dead', 'dead', null],
  ] as const)('after %i attempts: %s (%s), next attempt %p', (attempts, status, outcome, next) => {
    const f = handlerFailure({ ...base, attempts, error: new Error('boom') });
    expect(f).toMatchObject({
      status,
      outcome,
      attempts: attempts + 1,
      nextAttemptAt: next,
      lastError: 'boom',
    });
  });

  it('logs one line with the same fields in either outcome: next_attempt_at and nu_proposta included', () => {
    const retry = handlerFailure({ ...base, attempts: 0, error: new Error('boom') });
    expect(retry.log).toEqual({
      level: 'warn',
      message: 'handler failed: will retry',
      fields: {
        event_id: 7,
        evento: 'proposta.aprovada',
        nu_proposta: 4242,
        attempts: 1,
        next_attempt_at: '2026-01-02T03:04:06.000Z',
        err: 'boom',
      },
    });
    const dead = handlerFailure({ ...base, attempts: 2, error: new Error('boom') });
    expect(dead.log).toEqual({
      level: 'error',
      message: 'handler failed for the last time: event is dead (replayable)',
      fields: { ...retry.log.fields, attempts: 3, next_attempt_at: null },
    });
  });

  it('takes anything thrown, and keeps 1000 characters of the message for last_error, 200 for the log', () => {
    expect(handlerFailure({ ...base, attempts: 0, error: 'a string' }).error.message).toBe('a string');
    const long = handlerFailure({ ...base, attempts: 0, error: new Error('x'.repeat(2000)) });
    expect(long.lastError).toHaveLength(1000);
    expect(long.log.fields.err).toHaveLength(200);
  });

  it.each([
    ['cpf 52998224725 not found', 'cpf ***.982.247-** not found'],
    [
      'no borrower 529.982.247-25 (employer 11222333000181)',
      'no borrower ***.982.247-** (employer 11222333000181)',
    ],
    ['proposal 100001: boom', 'proposal 100001: boom'],
  ])('masks every CPF of %j in last_error and the log line', (thrown, shown) => {
    const f = handlerFailure({ ...base, attempts: 0, error: new Error(thrown) });
    expect(f.lastError).toBe(shown);
    expect(f.log.fields.err).toBe(shown);
    // The partner's onError handlers get the error as thrown.
    expect(f.error.message).toBe(thrown);
  });

  it('masks before it cuts: a CPF across the cut leaves none of its digits', () => {
    const atLog = handlerFailure({ ...base, attempts: 0, error: new Error(`${'x'.repeat(195)}52998224725`) });
    expect(atLog.log.fields.err).toBe(`${'x'.repeat(195)}***.9`);
    const atColumn = handlerFailure({
      ...base,
      attempts: 0,
      error: new Error(`${'x'.repeat(995)}52998224725`),
    });
    expect(atColumn.lastError).toBe(`${'x'.repeat(995)}***.9`);
  });
});
