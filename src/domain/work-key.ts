/**
 * The work key an event is processed under, in both stores: its proposal's (`p:<nu>`), else its
 * registration's (`r:<requestId>`, a registry result or poll answer naming no proposal), else its
 * own (`e:<id>`). A key's events run one at a time in order (SQLite mode's pipeline; cluster mode's
 * turns, their locks and holds), and forwarding keeps each destination's messages in the same lines
 * (domain/forwarding/messages.ts `orderKeyOf`).
 */
export interface WorkKeyParts {
  readonly nu_proposta?: number | string | null | undefined;
  readonly request_id?: string | null | undefined;
}

/**
 * The key an event shares with others, known before it has an id; null for an event that is its
 * own key (`e:<id>`, which no earlier turn can hold).
 */
export function sharedWorkKeyOf(e: WorkKeyParts): string | null {
  if (e.nu_proposta !== null && e.nu_proposta !== undefined) return `p:${String(e.nu_proposta)}`;
  if (e.request_id !== null && e.request_id !== undefined) return `r:${e.request_id}`;
  return null;
}

export function workKeyOf(e: WorkKeyParts & { readonly id: number | string }): string {
  return sharedWorkKeyOf(e) ?? `e:${e.id}`;
}
