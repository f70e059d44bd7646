/**
 * The webhook requests this process is answering, by the order time each got when it arrived
 * (before its body was read): in cluster mode the relay may not say "everything acknowledged before
 * T is in PostgreSQL" past the oldest of them, whose delivery is not in the spool yet
 * (src/domain/watermark.ts `coveredThrough`). The order time is PostgreSQL's clock as this replica
 * estimates it (`stamp`: runtime/cluster/order-clock.ts, issue 36), or its received_at before the relay's
 * first reading of PostgreSQL's clock.
 */
export class InFlightRequests {
  private last = 0;
  /** Insertion order is arrival order, so the first entry is the oldest. */
  private readonly open = new Map<number, string>();

  /** @param stamp the order time of a request arriving now; null: its received_at. */
  constructor(private readonly stamp: () => Date | null = () => null) {}

  /**
   * A request arrived at `receivedAt`: its order time (null when the stamp had none: received_at
   * stands for it) and the token that ends it.
   */
  begin(receivedAt: string): { token: number; orderAt: string | null } {
    this.last += 1;
    const orderAt = this.stamp()?.toISOString() ?? null;
    this.open.set(this.last, orderAt ?? receivedAt);
    return { token: this.last, orderAt };
  }

  /** Its answer left (after its spool commit, for a stored delivery). */
  end(token: number): void {
    this.open.delete(token);
  }

  /** The order time of the oldest request still open; null when none. */
  oldest(): string | null {
    for (const orderAt of this.open.values()) return orderAt;
    return null;
  }
}
