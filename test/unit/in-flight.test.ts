import { InFlightRequests } from '../../src/runtime/cluster/in-flight';

describe('InFlightRequests', () => {
  it('gives the received_at of the oldest request still open, whatever order they end in', () => {
    const open = new InFlightRequests();
    expect(open.oldest()).toBeNull();
    const a = open.begin('2026-11-25T12:00:00.000Z').token;
    const b = open.begin('2026-11-25T12:00:00.010Z').token;
    const c = open.begin('2026-11-25T12:00:00.020Z').token;
    expect(open.oldest()).toBe('2026-11-25T12:00:00.000Z');
    open.end(b);
    expect(open.oldest()).toBe('2026-11-25T12:00:00.000Z');
    open.end(a);
    expect(open.oldest()).toBe('2026-11-25T12:00:00.020Z');
    open.end(c);
    open.end(c); // an answer measured twice would be a bug elsewhere; it changes nothing here
    expect(open.oldest()).toBeNull();
  });

  it('keeps the order time its stamp gives, and received_at while the stamp has none', () => {
    let stamp: Date | null = null;
    const open = new InFlightRequests(() => stamp);
    // Before the relay's first reading of PostgreSQL's clock: no order time, received_at stands for it.
    expect(open.begin('2026-11-25T12:00:01.000Z')).toEqual({ token: 1, orderAt: null });
    expect(open.oldest()).toBe('2026-11-25T12:00:01.000Z');
    open.end(1);
    // A replica whose clock is 1 s ahead: its order time is PostgreSQL's, not its received_at.
    stamp = new Date('2026-11-25T12:00:00.004Z');
    expect(open.begin('2026-11-25T12:00:01.004Z')).toEqual({ token: 2, orderAt: '2026-11-25T12:00:00.004Z' });
    expect(open.oldest()).toBe('2026-11-25T12:00:00.004Z');
  });
});
