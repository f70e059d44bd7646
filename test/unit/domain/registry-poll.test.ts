import {
  decidePoll,
  POLL_REFUSED_MESSAGE,
  POLL_RETRY_MESSAGE,
  POLL_STALE_MESSAGE,
  type PollAnswer,
  pollStart,
  type PollTarget,
  refusedAnswer,
  staleLog,
} from '../../../src/domain/registry-poll';

/** One registry poll's decisions (src/domain/registry-poll.ts), which both stores apply. */

const o = { graceMs: 0, intervalMs: 1_000, maxIntervalMs: 8_000, maxAgeMs: 100_000 };
const T0 = Date.parse('2026-03-01T00:00:00.000Z');
const target = (over: Partial<PollTarget> = {}): PollTarget => ({
  requestId: 'req-1',
  nuProposta: 501,
  status: 'queued',
  pollAttempts: 2,
  stale: false,
  trackedAt: T0,
  ...over,
});
const noJitter = () => 1;
const err = (code: string | undefined, extra: Record<string, unknown> = {}): PollAnswer => ({
  ok: false,
  error: Object.assign(new Error(`boom ${code ?? ''}`.trim()), { code, ...extra }),
});

describe('pollStart', () => {
  it.each([
    ['queued, young', {}, 1_000, 'poll'],
    ['processing, young', { status: 'processing' }, 1_000, 'poll'],
    ['completed (the webhook won)', { status: 'completed' }, 1_000, 'skip'],
    ['error (final)', { status: 'error' }, 1_000, 'skip'],
    ['stale already', { stale: true }, 1_000, 'skip'],
    ['final beats old', { status: 'completed' }, 500_000, 'skip'],
    ['at the deadline: one last poll', {}, 100_000, 'poll'],
    ['past the deadline', {}, 100_001, 'stale'],
    ['unknown status, past the deadline', { status: 'weird' }, 100_001, 'stale'],
  ] as const)('%s → %s', (_name, over, age, action) => {
    expect(pollStart(target(over), T0 + age, o).action).toBe(action);
  });

  it('a stale start carries the operator line', () => {
    const start = pollStart(target(), T0 + 100_001, o);
    expect(start).toEqual({ action: 'stale', log: staleLog(target()) });
  });
});

describe('staleLog', () => {
  it.each([
    [501, 501],
    ['501', 501], // PostgreSQL keeps it as text: logged as SQLite logs it
    ['ABC-9', 'ABC-9'],
    [null, null],
    [12.5, 12.5], // a number is logged as stored: only text is put in the canonical form
  ] as const)('nu_proposta %j is logged as %j', (nu, logged) => {
    expect(staleLog(target({ nuProposta: nu }))).toEqual({
      level: 'error',
      fields: {
        request_id: 'req-1',
        nu_proposta: logged,
        status: 'queued',
        polls: 2,
        since: '2026-03-01T00:00:00.000Z',
      },
      message: POLL_STALE_MESSAGE,
    });
  });
});

describe('decidePoll', () => {
  const now = T0 + 10_000;
  // attempts 3 → base 1 s × 2² = 4 s, no jitter.
  const backoff = now + 4_000;

  it.each([
    // name, answer, outcome, next poll, last_poll_outcome, log level and message
    ['processing', { ok: true, status: 'processing', raw: {} }, 'ok', backoff, 'ok:processing', null],
    [
      'completed: final, no next poll',
      { ok: true, status: 'completed', raw: {} },
      'ok',
      null,
      'ok:completed',
      null,
    ],
    ['error: final too', { ok: true, status: 'error', raw: {} }, 'ok', null, 'ok:error', null],
    [
      'an unknown status: polled again',
      { ok: true, status: 'weird', raw: {} },
      'ok',
      backoff,
      'ok:weird',
      null,
    ],
    ['404', err('SERVICE_NOT_FOUND'), 'not_found', backoff, 'not_found:boom SERVICE_NOT_FOUND', 'warn'],
    [
      '401/403',
      err('SERVICE_AUTH_FAILED'),
      'unauthorized',
      backoff,
      'unauthorized:boom SERVICE_AUTH_FAILED',
      'error',
    ],
    [
      '429, short Retry-After',
      err('SERVICE_RATE_LIMITED', { retryAfterMs: 100 }),
      'rate_limited',
      backoff,
      'rate_limited:boom SERVICE_RATE_LIMITED',
      'warn',
    ],
    [
      '429, long Retry-After',
      err('SERVICE_RATE_LIMITED', { retryAfterMs: 30_000 }),
      'rate_limited',
      now + 30_000,
      'rate_limited:boom SERVICE_RATE_LIMITED',
      'warn',
    ],
    [
      '5xx',
      err('SERVICE_UNAVAILABLE'),
      'unavailable',
      backoff,
      'unavailable:boom SERVICE_UNAVAILABLE',
      'warn',
    ],
    [
      'network',
      err('SERVICE_NETWORK_ERROR'),
      'unavailable',
      backoff,
      'unavailable:boom SERVICE_NETWORK_ERROR',
      'warn',
    ],
    ['anything else', err(undefined), 'error', backoff, 'error:boom', 'warn'],
  ] as const)('%s', (_name, answer, outcome, next, recorded, level) => {
    const d = decidePoll(target(), answer as PollAnswer, now, o, noJitter);
    expect(d.outcome).toBe(outcome);
    expect(d.record).toEqual({ attempts: 3, nextPollAt: next, outcome: recorded });
    expect(d.stale).toBeNull();
    if (level === null) expect(d.log).toBeNull();
    else
      expect(d.log).toEqual({
        level,
        fields: { request_id: 'req-1', outcome, attempts: 3, err: recorded.slice(outcome.length + 1) },
        message: level === 'error' ? POLL_REFUSED_MESSAGE : POLL_RETRY_MESSAGE,
      });
  });

  it("an answer is one `poll` event per status, processed under the registration's work key", () => {
    const d = decidePoll(
      target(),
      { ok: true, status: 'processing', raw: { requestId: 'req-1', x: 1 } },
      now,
      o,
      noJitter,
    );
    expect(d.event).toEqual({
      dedupKey: 'poll:req-1:processing',
      kind: 'poll',
      requestId: 'req-1',
      registryStatus: 'processing',
      body: '{"requestId":"req-1","x":1}',
      workKey: 'r:req-1',
    });
  });

  it('an answer without a body is stored as its two fields; a failure stores nothing', () => {
    expect(
      decidePoll(target(), { ok: true, status: 'queued', raw: null }, now, o, noJitter).event?.body,
    ).toBe('{"requestId":"req-1","status":"queued"}');
    expect(decidePoll(target(), err('SERVICE_NOT_FOUND'), now, o, noJitter).event).toBeNull();
  });

  it('the deadline: one last poll at it, then stale (with the attempts counted)', () => {
    const last = decidePoll(target(), err('SERVICE_NOT_FOUND'), T0 + 99_000, o, noJitter);
    expect(last.record.nextPollAt).toBe(T0 + 100_000);
    expect(last.stale).toBeNull();
    const after = decidePoll(target(), err('SERVICE_NOT_FOUND'), T0 + 100_000, o, noJitter);
    expect(after.record.nextPollAt).toBeNull();
    expect(after.stale).toEqual(staleLog(target({ pollAttempts: 3 })));
  });

  it('a final answer at the deadline is not stale', () => {
    const d = decidePoll(target(), { ok: true, status: 'completed', raw: {} }, T0 + 200_000, o, noJitter);
    expect(d.stale).toBeNull();
    expect(d.record.nextPollAt).toBeNull();
  });

  it('keeps 200 characters of a failure', () => {
    const d = decidePoll(target(), { ok: false, error: new Error('x'.repeat(500)) }, now, o, noJitter);
    expect(d.record.outcome).toBe(`error:${'x'.repeat(200)}`);
    expect(d.log?.fields.err).toBe('x'.repeat(200));
  });

  it('jitter comes from the random passed in', () => {
    const d = decidePoll(target(), { ok: true, status: 'queued', raw: {} }, now, o, () => 0);
    expect(d.record.nextPollAt).toBe(now + 3_200);
  });
});

describe('refusedAnswer', () => {
  const now = T0 + 10_000;
  const refusal = Object.assign(new Error('SQLITE_FULL: database or disk is full'), { code: 'SQLITE_FULL' });

  it("an answer the store refused is a failed poll: no event, the attempt counted, the schedule's back-off, a warning", () => {
    const answered = decidePoll(target(), { ok: true, status: 'completed', raw: {} }, now, o, noJitter);
    const refused = refusedAnswer(target(), refusal, now, o, noJitter);
    expect(answered.record.nextPollAt).toBeNull();
    expect(refused).toEqual({
      outcome: 'error',
      event: null,
      record: {
        attempts: 3,
        nextPollAt: decidePoll(target(), err('SERVICE_NETWORK_ERROR'), now, o, noJitter).record.nextPollAt,
        outcome: 'error:SQLITE_FULL: database or disk is full',
      },
      stale: null,
      log: {
        level: 'warn',
        fields: {
          request_id: 'req-1',
          outcome: 'error',
          attempts: 3,
          err: 'SQLITE_FULL: database or disk is full',
        },
        message: POLL_RETRY_MESSAGE,
      },
    });
    expect(refused.record.nextPollAt).toBeGreaterThan(now);
  });

  it('past the deadline, a refused answer makes the registration stale as a failed poll does', () => {
    const refused = refusedAnswer(target(), refusal, T0 + 100_000, o, noJitter);
    expect(refused.record.nextPollAt).toBeNull();
    expect(refused.stale).toEqual(staleLog(target({ pollAttempts: 3 })));
  });
});
