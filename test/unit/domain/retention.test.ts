import { EVENT_STATUSES } from '../../../src/domain/event-status';
import { isBodyPrunable, isMessagePrunable, retentionCutoff } from '../../../src/domain/retention';

/** The retention rule both stores read (src/domain/retention.ts), against the contract's words. */

describe('retention rule', () => {
  it.each(EVENT_STATUSES.map((s) => [s, ['done', 'ignored', 'invalid'].includes(s)] as const))(
    'an old %s event gives up its body: %s',
    (status, prunable) => {
      expect(isBodyPrunable(status)).toBe(prunable);
    },
  );

  it.each([
    [['delivered', 'delivered'], true],
    [[], true],
    [['delivered', 'dead'], false],
    [['pending'], false],
  ] as const)('a message delivered %j may go: %s', (statuses, prunable) => {
    expect(isMessagePrunable(statuses)).toBe(prunable);
  });

  it('the cutoff is whole days before now', () => {
    expect(retentionCutoff(new Date('2026-03-31T12:00:00.000Z'), 30).toISOString()).toBe(
      '2026-03-01T12:00:00.000Z',
    );
  });
});
