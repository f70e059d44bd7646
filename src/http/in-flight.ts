/**
 * The webhook requests this process is answering, by the received_at each got when it arrived
 * (before its body was read): in cluster mode the relay may not say "everything acknowledged before
 * T is in PostgreSQL" past the oldest of them, whose delivery is not in the spool yet
 * (src/domain/watermark.ts `coveredThrough`).
 */
export class InFlightRequests {
  private last = 0;
  /** Insertion order is arrival order, so the first entry is the oldest. */
  private readonly open = new Map<number, string>();

  /** A request arrived at `receivedAt`; the token ends it. */
  begin(receivedAt: string): number {
    this.last += 1;
    this.open.set(this.last, receivedAt);
    return this.last;
  }

  /** Its answer left (after its spool commit, for a stored delivery). */
  end(token: number): void {
    this.open.delete(token);
  }

  /** The received_at of the oldest request still open; null when none. */
  oldest(): string | null {
    for (const receivedAt of this.open.values()) return receivedAt;
    return null;
  }
}
