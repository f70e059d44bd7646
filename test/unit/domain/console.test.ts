import {
  auditDetailText,
  averbacaoPage,
  hasUnindexedCondition,
  hourOf,
  JSON_SCAN_CAP,
  type NewRefusal,
  overflowRefusal,
  overviewSinceHour,
  pageOf,
  REFUSAL_ROWS_PER_WINDOW,
  refusalWindowStart,
  refusalWrite,
  ROLLUP_CHUNK_ROWS,
  rollupBusy,
  rollupCaughtUp,
  rollupStep,
  rollupWindow,
  SCAN_CAP,
  scanCapFor,
  sessionTokenCurrent,
  silenceFigures,
  tokenFingerprint,
  tokenFingerprints,
  windowLow,
  windowPage,
} from '../../../src/domain/console';

/** The console's pure rules (src/domain/console.ts): pages, windows, the rollup, sessions, the audit. */

const rows = (...ids: number[]) => ids.map((id) => ({ id }));

describe('filters and pages', () => {
  it.each<[Parameters<typeof hasUnindexedCondition>[0], boolean, number]>([
    [{}, false, SCAN_CAP],
    [{ evento: 'proposta.criada' }, true, SCAN_CAP],
    [{ kind: 'poll' }, true, SCAN_CAP],
    [{ json: [] }, false, SCAN_CAP],
    [{ json: [{ path: 'dados.x', keys: ['dados', 'x'], value: '1' }] }, true, JSON_SCAN_CAP],
    [{ scanCap: 7 }, false, 7],
    [{ scanCap: 7, json: [{ path: 'a', keys: ['a'], value: '1' }] }, true, 7],
  ])('%j: unindexed %p, scan cap %p', (filter, unindexed, cap) => {
    expect(hasUnindexedCondition(filter)).toBe(unindexed);
    expect(scanCapFor(filter)).toBe(cap);
  });

  it.each<[number[], number, { ids: number[]; next: number | null }]>([
    [[], 2, { ids: [], next: null }],
    [[9, 8], 2, { ids: [9, 8], next: null }],
    [[9, 8, 7], 2, { ids: [9, 8], next: 8 }],
    [[9], 1, { ids: [9], next: null }],
    [[9, 8], 1, { ids: [9], next: 9 }],
  ])('pageOf(%j, limit %p)', (ids, limit, expected) => {
    const page = pageOf(rows(...ids), limit, 5);
    expect({ ids: page.rows.map((r) => r.id), next: page.next }).toEqual(expected);
    expect(page.stoppedAt).toBe(5);
  });

  it('averbacaoPage pages by rid and keeps the rows whole', () => {
    const rs = [
      { rid: 9, request_id: 'a' },
      { rid: 8, request_id: 'b' },
      { rid: 7, request_id: 'c' },
    ];
    expect(averbacaoPage(rs, 2)).toEqual({ rows: rs.slice(0, 2), next: 8 });
    expect(averbacaoPage(rs, 3)).toEqual({ rows: rs, next: null });
  });

  it.each<[{ n: number; low: number | null } | undefined, number, number | undefined]>([
    [undefined, 10, undefined],
    [{ n: 10, low: 40 }, 10, undefined], // the window holds them all
    [{ n: 11, low: 40 }, 10, 41], // cut: ids from the one above the lowest
    [{ n: 11, low: null }, 10, undefined],
  ])('windowLow(%j, cap %p) → %p', (edge, cap, expected) => {
    expect(windowLow(edge, cap)).toBe(expected);
  });

  it.each<
    [number[], number, number | undefined, { ids: number[]; next: number | null; stoppedAt: number | null }]
  >([
    [[9, 8], 2, undefined, { ids: [9, 8], next: null, stoppedAt: null }],
    [[9, 8, 7], 2, 41, { ids: [9, 8], next: 8, stoppedAt: null }],
    [[9, 8], 2, 41, { ids: [9, 8], next: 41, stoppedAt: 41 }],
    [[9], 2, 41, { ids: [9], next: 41, stoppedAt: 41 }],
  ])('windowPage(%j, limit %p, low %p)', (ids, limit, low, expected) => {
    const page = windowPage(rows(...ids), limit, low);
    expect({ ids: page.rows.map((r) => r.id), next: page.next, stoppedAt: page.stoppedAt }).toEqual(expected);
  });
});

describe('the overview', () => {
  const now = new Date('2026-11-21T13:30:00.000Z');

  it.each<[number | null, number, { lastDeliveryAt: string | null; inFlight: number | null }, number]>([
    [null, 60_000, { lastDeliveryAt: null, inFlight: null }, 0],
    // Silent for 60 s exactly: due, the proposals in flight counted.
    [now.getTime() - 60_000, 60_000, { lastDeliveryAt: '2026-11-21T13:29:00.000Z', inFlight: 3 }, 1],
    [now.getTime() - 59_999, 60_000, { lastDeliveryAt: '2026-11-21T13:29:00.001Z', inFlight: null }, 0],
    [now.getTime() - 3_600_000, 0, { lastDeliveryAt: '2026-11-21T12:30:00.000Z', inFlight: null }, 0],
  ])('last delivery %p, silence %p ms', (last, silenceMs, expected, counted) => {
    let calls = 0;
    const figures = silenceFigures(now, last, { silenceMs }, () => {
      calls += 1;
      return 3;
    });
    expect(figures).toEqual(expected);
    expect(calls).toBe(counted);
  });

  it('hours are UTC hours as received_at begins; the overview shows the last 7 days', () => {
    expect(hourOf(Date.parse('2026-11-21T13:59:59.999Z'))).toBe('2026-11-21T13');
    expect(overviewSinceHour(now)).toBe('2026-11-14T13');
  });
});

describe('the hourly rollup', () => {
  it.each<[number | null, number, boolean, number]>([
    [null, 0, false, 0],
    [null, 10, false, 10],
    [9, 10, false, 1],
    [10, 10, true, 0],
    [11, 10, true, -1],
  ])('watermark %p, top %p: caught up %p, behind %p when busy', (last, top, caughtUp, behind) => {
    expect(rollupCaughtUp({ last, top })).toBe(caughtUp);
    expect(rollupBusy({ last, top })).toEqual({ behind, locked: true });
  });

  it('keeps 8 days: its window starts then, at that hour', () => {
    expect(rollupWindow(new Date('2026-11-21T13:30:00.000Z'))).toEqual({
      since: '2026-11-13T13:30:00.000Z',
      keepFrom: '2026-11-13T13',
    });
  });

  it.each<[number | null, number, number | null, { from: number; to: number; behind: number }]>([
    // After the watermark, to the top.
    [100, 150, null, { from: 100, to: 150, behind: 0 }],
    // A first update: from the lowest id received in the window.
    [null, 150, 120, { from: 119, to: 150, behind: 0 }],
    // A first update with nothing in the window: nothing to count.
    [null, 150, null, { from: 150, to: 150, behind: 0 }],
    // At most a chunk per call.
    [0, ROLLUP_CHUNK_ROWS + 5, null, { from: 0, to: ROLLUP_CHUNK_ROWS, behind: 5 }],
    [0, ROLLUP_CHUNK_ROWS, null, { from: 0, to: ROLLUP_CHUNK_ROWS, behind: 0 }],
  ])('watermark %p, top %p, first in window %p', (last, top, first, expected) => {
    expect(rollupStep({ last, top }, first)).toEqual(expected);
  });
});

describe('sessions', () => {
  const fps = tokenFingerprints({ admin: 'admin-token', viewer: undefined });

  it('fingerprints a token with a keyed hash: stable, and different per token', () => {
    expect(tokenFingerprint('admin-token')).toMatch(/^[0-9a-f]{64}$/);
    // A known vector (`printf 'consig-receiver console session' | openssl dgst -sha256 -hmac admin-token`):
    // the label is part of every stored fingerprint, so changing it would end every open session.
    expect(tokenFingerprint('admin-token')).toBe(
      '5a7e0c1e0af35a4ac55f3e303a706c2793801cc8a6ee3b630ebc7aa03847b984',
    );
    expect(tokenFingerprint('admin-token')).toBe(fps.admin);
    expect(tokenFingerprint('admin-token2')).not.toBe(fps.admin);
    expect(fps.viewer).toBeNull();
    expect(tokenFingerprints({ admin: undefined, viewer: 'v' })).toEqual({
      admin: null,
      viewer: tokenFingerprint('v'),
    });
  });

  it.each<['admin' | 'viewer', string, boolean]>([
    ['admin', tokenFingerprint('admin-token'), true],
    ['admin', tokenFingerprint('old-admin-token'), false],
    ['viewer', tokenFingerprint('admin-token'), false], // the role's token is not set
  ])('a %s session opened with a token of fingerprint %s… is current: %p', (role, tokenFp, current) => {
    expect(sessionTokenCurrent({ role, token_fp: tokenFp }, fps)).toBe(current);
  });
});

describe('the audit', () => {
  const refusal: NewRefusal = {
    at: '2026-11-21T13:45:10.123Z',
    role: 'viewer',
    session: 'abc',
    person: 'maria.souza@lender.example',
    route: 'POST /console/dead/replay',
    reason: 'role',
    ip: '10.0.0.1',
  };

  it('a refusal window is its UTC hour', () => {
    expect(refusalWindowStart(refusal.at)).toBe('2026-11-21T13:00:00.000Z');
    expect(refusalWindowStart('2026-11-21T13:00:00.000Z')).toBe('2026-11-21T13:00:00.000Z');
  });

  it.each<[{ same: number | null; overflow: number | null; rows: number }, unknown]>([
    [{ same: 4, overflow: 9, rows: REFUSAL_ROWS_PER_WINDOW }, { add: 4 }],
    [{ same: null, overflow: null, rows: REFUSAL_ROWS_PER_WINDOW - 1 }, { insert: refusal }],
    [{ same: null, overflow: 9, rows: REFUSAL_ROWS_PER_WINDOW }, { add: 9 }],
    [
      { same: null, overflow: null, rows: REFUSAL_ROWS_PER_WINDOW },
      { insert: { ...refusal, role: null, session: null, person: null, route: '*', ip: null } },
    ],
  ])('window %j → %j', (window, expected) => {
    expect(refusalWrite(refusal, window)).toEqual(expected);
  });

  it('an overflow row keeps the time and the reason only', () => {
    expect(overflowRefusal(refusal)).toEqual({
      at: refusal.at,
      role: null,
      session: null,
      person: null,
      route: '*',
      reason: 'role',
      ip: null,
    });
  });

  it.each<[Record<string, unknown> | null, string | null]>([
    [null, null],
    [{ filter: { nu_proposta: 7 }, count: 1 }, '{"filter":{"nu_proposta":7},"count":1}'],
    [
      { json: '{"dados":{"nu_cpf":"12345678909"}}' },
      '{"json":"{\\"dados\\":{\\"nu_cpf\\":\\"***.456.789-**\\"}}"}',
    ],
    [{ cpf: 12345678909, conta: 123456789012 }, '{"cpf":***.456.789-**,"conta":123456789012}'],
    [
      { note: 'cpf 123.456.789-09, cnpj 12345678000195' },
      '{"note":"cpf ***.456.789-**, cnpj 12345678000195"}',
    ],
  ])('the detail %j is stored as %s', (detail, text) => {
    expect(auditDetailText(detail)).toBe(text);
  });
});
