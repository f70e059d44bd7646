import { InFlightRequests } from '../../src/http/in-flight';

describe('InFlightRequests', () => {
  it('gives the received_at of the oldest request still open, whatever order they end in', () => {
    const open = new InFlightRequests();
    expect(open.oldest()).toBeNull();
    const a = open.begin('2026-11-25T12:00:00.000Z');
    const b = open.begin('2026-11-25T12:00:00.010Z');
    const c = open.begin('2026-11-25T12:00:00.020Z');
    expect(open.oldest()).toBe('2026-11-25T12:00:00.000Z');
    open.end(b);
    expect(open.oldest()).toBe('2026-11-25T12:00:00.000Z');
    open.end(a);
    expect(open.oldest()).toBe('2026-11-25T12:00:00.020Z');
    open.end(c);
    open.end(c); // an answer measured twice would be a bug elsewhere; it changes nothing here
    expect(open.oldest()).toBeNull();
  });
});
