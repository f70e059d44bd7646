import type { Client } from 'pg';
import { decodeFeedCursor } from '../../src/core/feed-reader';
import { replay } from '../../src/domain/lifecycle';
import { bodyOf, FakeDestination } from './destination';
import type { FeedReader, Load } from './failover-load';

/**
 * The checks of the failover test (issue 32), on the new primary after everything drained: the
 * rows of the issue's table, each a count that must be 0 (answers aside), from what the service
 * was answered, what the lender's destination and a change-feed reader saw, and what the new
 * primary holds.
 */

export interface FailoverFigures {
  requests: number;
  /** Requests answered other than 200, and those without an answer. */
  non200: number;
  noAnswer: number;
  /** Resets of kept-alive sockets before an answer, sent again at once (see Answer.keepAliveRace). */
  keepAliveRaces: number;
  worstAnswerMs: number;
  acknowledged: number;
  /** Deliveries answered 200 whose webhook_id is not in the new primary's events. */
  ackedMissing: number;
  /** Proposals whose status is not what the events the service sent (answered 200) end at. */
  wrongEndStatus: number;
  /** Proposals created by another event than the first one the service sent. */
  createdFromLater: number;
  /** When those proposals' first events were answered 200 (to place them against the failover). */
  createdFromLaterAckedAt: number[];
  /** Events not done on the new primary (pending, failed, dead). */
  notDone: number;
  /** Distinct webhook-ids the destination got about deliveries the new primary does not have. */
  destAboutMissing: number;
  /** webhook-ids beyond the first for one fact (delivery and message type) at the destination. */
  factResentNewId: number;
  /** Forwarded event_ids that name another delivery on the new primary than when forwarded. */
  eventIdsRenamed: number;
  /** Forwarded event_ids that name no delivery on the new primary (informational). */
  eventIdsGone: number;
  /** Feed cursors read that now stand for another message (null: the cursor's form is not readable here). */
  feedIdsReissued: number | null;
  /** Messages in the new primary's feed that the reader, following its cursor, never got. */
  feedSkipped: number;
  /** Outbox messages for the destination it never received, and received requests that did not verify. */
  outboxNotReceived: number;
  /** Their delivery rows for the destination: status and attempts, or none. */
  outboxNotReceivedStates: string;
  badSignatures: number;
  /** Destination requests not tied to a delivery the service sent (the harness's own check: must be 0). */
  unattributed: number;
  /** webhook-ids received with two different `data` (a message made again after a reprocessing; informational). */
  sameIdOtherData: number;
  /** The fields of `data` (dotted paths) that differed between the copies, with how many webhook-ids each. */
  sameIdOtherDataFields: string;
  destinationMessages: number;
  feedMessages: number;
}

/** What the checks read from PostgreSQL once everything drained (the upgrade tier's checks too). */
export interface Snapshot {
  events: Map<string, { id: string; status: string }>;
  eventKeyById: Map<string, string>;
  proposals: Map<string, string>;
  creators: Map<string, string>;
  messages: {
    id: string;
    webhook_id: string;
    type: string;
    delivery: string | null;
    attempts: number | null;
  }[];
}

export async function snapshot(client: Client): Promise<Snapshot> {
  const q = async <T>(sql: string): Promise<T[]> => (await client.query(sql)).rows as T[];
  const events = await q<{ id: string; dedup_key: string; status: string }>(
    'SELECT id::text AS id, dedup_key, status FROM events',
  );
  const proposals = await q<{ nu_proposta: string; status: string }>(
    'SELECT nu_proposta, status FROM proposals',
  );
  const creators = await q<{ nu_proposta: string; evento: string }>(
    'SELECT nu_proposta, evento FROM proposal_transitions WHERE from_status IS NULL',
  );
  const messages = await q<Snapshot['messages'][number]>(
    `SELECT m.id::text AS id, m.webhook_id, m.type, d.status AS delivery, d.attempts
     FROM forward_messages m LEFT JOIN forward_deliveries d ON d.message_id = m.id AND d.destination = 'crm'`,
  );
  return {
    events: new Map(events.map((e) => [e.dedup_key, e])),
    eventKeyById: new Map(events.map((e) => [e.id, e.dedup_key])),
    proposals: new Map(proposals.map((p) => [p.nu_proposta, p.status])),
    creators: new Map(creators.map((c) => [c.nu_proposta, c.evento])),
    messages,
  };
}

export async function checkFailover(
  client: Client,
  load: Load,
  destination: FakeDestination,
  feed: FeedReader,
  forwardSecret: string,
): Promise<FailoverFigures> {
  const s = await snapshot(client);
  const acked = [...load.sent.values()].filter((d) => d.ackedAt !== null);
  const answers = load.answers.filter((a) => !a.keepAliveRace);
  return {
    requests: answers.length,
    non200: answers.filter((a) => a.status !== 200).length,
    noAnswer: answers.filter((a) => a.status === 0).length,
    keepAliveRaces: load.answers.length - answers.length,
    worstAnswerMs: Math.max(0, ...answers.map((a) => a.ms)),
    acknowledged: acked.length,
    ackedMissing: acked.filter((d) => !s.events.has(d.key)).length,
    ...checkProposals(s, load),
    notDone: [...s.events.values()].filter((e) => e.status !== 'done').length,
    ...checkDestination(s, load, destination, forwardSecret),
    ...checkFeed(s, feed),
  };
}

/**
 * Proposals at another status than the events answered 200 end at, those created from a later
 * event, and how many proposals are either (out of order), of those with an event answered 200.
 */
export function checkProposals(s: Snapshot, load: Load) {
  let wrongEndStatus = 0;
  let outOfOrder = 0;
  let proposals = 0;
  const createdFromLaterAckedAt: number[] = [];
  for (const p of load.proposals) {
    const sent = p.keys.filter((k) => load.sent.get(k)?.ackedAt != null).map((k) => load.sent.get(k)?.evento);
    if (sent.length === 0) continue;
    proposals += 1;
    const expected = replay(sent as Parameters<typeof replay>[0]).status;
    const wrong = s.proposals.get(String(p.nu)) !== expected;
    if (wrong) wrongEndStatus += 1;
    const creator = s.creators.get(String(p.nu));
    const later = creator !== undefined && creator !== p.eventos[0];
    if (later) createdFromLaterAckedAt.push(load.sent.get(p.keys[0] as string)?.ackedAt ?? 0);
    if (wrong || later) outOfOrder += 1;
  }
  return {
    wrongEndStatus,
    createdFromLater: createdFromLaterAckedAt.length,
    createdFromLaterAckedAt,
    outOfOrder,
    proposals,
  };
}

/** What the destination got, each request tied to the delivery it is about (its fact). */
function checkDestination(s: Snapshot, load: Load, destination: FakeDestination, secret: string) {
  const keyOf = new Map([...load.sent.values()].map((d) => [`${d.proposal.nu}|${d.evento}`, d.key]));
  const idsByFact = new Map<string, Set<string>>();
  const about = new Map<string, string>();
  /** Every delivery each forwarded event_id was seen naming (two, when the id was issued again). */
  const eventIds = new Map<string, Set<string>>();
  let unattributed = 0;
  let badSignatures = 0;
  for (const r of destination.requests) {
    if (!FakeDestination.verifies(r, secret)) badSignatures += 1;
    const body = bodyOf(r);
    const data = body.data ?? {};
    const key: string | undefined =
      body.type === 'event.received'
        ? data.payload?.metadata?.webhook_id
        : keyOf.get(`${data.nu_proposta}|${data.evento}`);
    if (key === undefined || !load.sent.has(key)) unattributed += 1;
    const fact = `${key ?? `?${r.webhookId}`}|${body.type}`;
    idsByFact.set(fact, (idsByFact.get(fact) ?? new Set()).add(r.webhookId));
    about.set(r.webhookId, key ?? '');
    if (data.event_id !== undefined && key !== undefined) {
      const id = String(data.event_id);
      eventIds.set(id, (eventIds.get(id) ?? new Set()).add(key));
    }
  }
  let eventIdsRenamed = 0;
  let eventIdsGone = 0;
  for (const [id, keys] of eventIds) {
    const now = s.eventKeyById.get(id);
    if (now === undefined) eventIdsGone += 1;
    else if (keys.size > 1 || !keys.has(now)) eventIdsRenamed += 1;
  }
  const received = new Set(destination.requests.map((r) => r.webhookId));
  const dataById = new Map<string, Set<string>>();
  for (const r of destination.requests)
    dataById.set(r.webhookId, (dataById.get(r.webhookId) ?? new Set()).add(JSON.stringify(bodyOf(r).data)));
  const wanted = new Set(['proposal.changed', 'event.received']);
  return {
    destAboutMissing: [...about.values()].filter((k) => !s.events.has(k)).length,
    factResentNewId: [...idsByFact.values()].reduce((n, ids) => n + ids.size - 1, 0),
    eventIdsRenamed,
    eventIdsGone,
    ...notReceived(s.messages.filter((m) => wanted.has(m.type) && !received.has(m.webhook_id))),
    badSignatures,
    unattributed,
    sameIdOtherData: [...dataById.values()].filter((d) => d.size > 1).length,
    sameIdOtherDataFields: differingFields(dataById),
    destinationMessages: received.size,
  };
}

/** The outbox messages the destination never received, and their delivery rows' states. */
function notReceived(missing: Snapshot['messages']) {
  const states = new Map<string, number>();
  for (const m of missing) {
    const state = m.delivery === null ? 'no delivery row' : `${m.delivery} after ${m.attempts} attempts`;
    states.set(state, (states.get(state) ?? 0) + 1);
  }
  return {
    outboxNotReceived: missing.length,
    outboxNotReceivedStates: [...states].map(([state, n]) => `${n} ${state}`).join(', '),
  };
}

/** For the webhook-ids received with two different `data`: which fields differed, and how often. */
function differingFields(dataById: Map<string, Set<string>>): string {
  const counts = new Map<string, number>();
  const paths = (a: unknown, b: unknown, at: string, out: Set<string>): void => {
    if (typeof a === 'object' && a !== null && typeof b === 'object' && b !== null) {
      for (const k of new Set([...Object.keys(a), ...Object.keys(b)]))
        paths(
          (a as Record<string, unknown>)[k],
          (b as Record<string, unknown>)[k],
          at ? `${at}.${k}` : k,
          out,
        );
    } else if (JSON.stringify(a) !== JSON.stringify(b)) out.add(at);
  };
  for (const versions of dataById.values()) {
    if (versions.size < 2) continue;
    const [first, ...rest] = [...versions].map((v) => JSON.parse(v) as unknown);
    const out = new Set<string>();
    for (const other of rest) paths(first, other, '', out);
    for (const p of out) counts.set(p, (counts.get(p) ?? 0) + 1);
  }
  return [...counts].map(([p, n]) => `${p} ${n}`).join(', ');
}

/** Page-end cursors that now name another message; feed messages the reader never got. */
function checkFeed(s: Snapshot, feed: FeedReader) {
  const byId = new Map(s.messages.map((m) => [m.id, m.webhook_id]));
  let feedIdsReissued: number | null = 0;
  for (const page of feed.pages) {
    const id = decodeFeedCursor(page.cursor);
    if (id === null) {
      feedIdsReissued = null;
      break;
    }
    const now = byId.get(String(id));
    if (now !== undefined && now !== page.ids.at(-1)) feedIdsReissued += 1;
  }
  const inFeed = s.messages.filter((m) => m.type === 'proposal.changed' || m.type === 'averbacao.result');
  return {
    feedIdsReissued,
    feedSkipped: inFeed.filter((m) => !feed.seen.has(m.webhook_id)).length,
    feedMessages: feed.seen.size,
  };
}

/** The table of issue 32, one column per scenario. */
export function formatFailoverTable(
  columns: { name: string; figures: FailoverFigures; extra: Record<string, string> }[],
): string {
  const rows: [string, (f: FailoverFigures) => string][] = [
    [
      'answers (requests, not 200, no answer, worst; keep-alive races retried)',
      (f) => `${f.requests}, ${f.non200}, ${f.noAnswer}, worst ${f.worstAnswerMs} ms; ${f.keepAliveRaces}`,
    ],
    ['acknowledged deliveries missing from the new primary', (f) => `${f.ackedMissing} of ${f.acknowledged}`],
    ['proposals ending at another status than the last sent', (f) => String(f.wrongEndStatus)],
    ['proposals created from a later event', (f) => String(f.createdFromLater)],
    ['events not done on the new primary', (f) => String(f.notDone)],
    [
      'lender: messages about deliveries the new primary lacks',
      (f) => `${f.destAboutMissing} of ${f.destinationMessages}`,
    ],
    ['lender: same fact again under a new webhook-id', (f) => String(f.factResentNewId)],
    [
      'forwarded event_ids naming another delivery now',
      (f) => `${f.eventIdsRenamed} (naming none: ${f.eventIdsGone})`,
    ],
    [
      'feed cursors read that now name another message',
      (f) => (f.feedIdsReissued === null ? 'n/a' : String(f.feedIdsReissued)),
    ],
    [
      'feed messages a reader following its cursor skipped',
      (f) => `${f.feedSkipped} of ${f.feedMessages} read`,
    ],
    [
      'outbox messages the destination never received',
      (f) => `${f.outboxNotReceived}${f.outboxNotReceived > 0 ? ` (${f.outboxNotReceivedStates})` : ''}`,
    ],
    ['destination requests not verifying', (f) => String(f.badSignatures)],
    ['destination requests tied to no delivery sent', (f) => String(f.unattributed)],
    [
      'lender: one webhook-id received with two different data (fields that differed)',
      (f) => `${f.sameIdOtherData}${f.sameIdOtherDataFields === '' ? '' : ` (${f.sameIdOtherDataFields})`}`,
    ],
  ];
  const extraNames = [...new Set(columns.flatMap((c) => Object.keys(c.extra)))];
  const lines = [
    `| | ${columns.map((c) => c.name).join(' | ')} |`,
    `|---|${columns.map(() => '---').join('|')}|`,
    ...rows.map(([label, cell]) => `| ${label} | ${columns.map((c) => cell(c.figures)).join(' | ')} |`),
    ...extraNames.map((n) => `| ${n} | ${columns.map((c) => c.extra[n] ?? '').join(' | ')} |`),
  ];
  return lines.join('\n');
}
