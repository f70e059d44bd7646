import {
  RETENTION_BATCH,
  RETENTION_LOG,
  removableMessages,
  retentionLog,
  spoolDeliveryOwnsEvent,
} from '../../../src/domain/retention';

/** How both stores apply the retention rule (src/domain/retention.ts): walk, batches, log lines. */

describe('removableMessages', () => {
  const d = (messageId: number, status: string) => ({ messageId, status });
  it.each([
    ['delivered everywhere', [d(1, 'delivered'), d(1, 'delivered')], undefined, [1]],
    ['no delivery at all', [], undefined, [1]],
    ['dead at one', [d(1, 'delivered'), d(1, 'dead')], undefined, []],
    ['pending at one', [d(1, 'pending'), d(1, 'delivered')], undefined, []],
    ['PostgreSQL: all read under the lock', [d(1, 'delivered'), d(1, 'delivered')], new Map([[1, 2]]), [1]],
    ['PostgreSQL: one held by another transaction (skipped)', [d(1, 'delivered')], new Map([[1, 2]]), []],
  ] as const)('%s', (_name, deliveries, total, gone) => {
    expect(removableMessages([1], deliveries, total)).toEqual(gone);
  });

  it('keeps the candidates in their order, each judged on its own deliveries', () => {
    const deliveries = [d(3, 'delivered'), d(1, 'delivered'), d(2, 'pending'), d(2, 'delivered')];
    expect(removableMessages([1, 2, 3, 4], deliveries)).toEqual([1, 3, 4]);
  });
});

describe('the spool and the batches', () => {
  it.each([
    ['accepted', 7, true],
    ['quarantined', 7, true],
    ['duplicate', 7, false],
    ['rejected', null, false],
    ['accepted', null, false],
  ] as const)('a relayed %s delivery (event %s) takes its event with it: %s', (outcome, eventId, owns) => {
    expect(spoolDeliveryOwnsEvent(outcome, eventId)).toBe(owns);
  });

  it('the batch sizes each store walks with', () => {
    expect(RETENTION_BATCH).toEqual({
      sqlite: { bodies: 2000, messages: 500, proposals: 500 },
      postgres: { bodies: 1000, messages: 250, proposals: 250 },
      spool: { command: 2000, replica: 500 },
    });
  });
});

describe('retentionLog (the same lines in both modes)', () => {
  const fields = { retention_days: 30, replica: 'r1' };
  it.each([
    ['nothing removed: no line', {}, []],
    ['nothing removed, counted', { pruned: 0, forwarded: 0, spool: { deliveries: 0, events: 0 } }, []],
    [
      'bodies and messages, in the pass order',
      { forwarded: 2, pruned: 5 },
      [
        { fields: { pruned: 5, ...fields }, message: RETENTION_LOG.bodies },
        { fields: { forwarded: 2, ...fields }, message: RETENTION_LOG.forwarded },
      ],
    ],
    [
      "bodies, messages and proposals' personal data, in the pass order (issue 45)",
      { anonymised: 3, forwarded: 2, pruned: 5 },
      [
        { fields: { pruned: 5, ...fields }, message: RETENTION_LOG.bodies },
        { fields: { forwarded: 2, ...fields }, message: RETENTION_LOG.forwarded },
        { fields: { anonymised: 3, ...fields }, message: RETENTION_LOG.anonymised },
      ],
    ],
    ['no personal data removed, counted: no line', { anonymised: 0 }, []],
    [
      'the spool',
      { spool: { deliveries: 3, events: 0 } },
      [{ fields: { deliveries: 3, events: 0, ...fields }, message: RETENTION_LOG.spool }],
    ],
    [
      'the spool, events counted without deliveries: still said',
      { spool: { deliveries: 0, events: 4 } },
      [{ fields: { deliveries: 0, events: 4, ...fields }, message: RETENTION_LOG.spool }],
    ],
  ] as const)('%s', (_name, removed, lines) => {
    expect(retentionLog(removed, fields)).toEqual(lines);
  });
});
