import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from 'pg';
import { Webhook } from 'standardwebhooks';
import { verifyStandardWebhook } from '../src/domain/forwarding/standard-webhooks';

/**
 * The lender's side of rigs/cluster-crash.ts: a destination on loopback that the three replicas
 * forward `proposal.changed` to (docs/forwarding.md, in cluster mode),
 * and the checks of what it received against PostgreSQL's outbox. It records every request as it
 * arrives (its `webhook-id`, arrival order, raw body, signature verdict) and answers 200 at once, so
 * everything it shows about order, loss and re-sends is the sender's doing — except at the start:
 * it holds its answers until the runner has SIGKILLed the sender ({@link ForwardDestination.release}),
 * so that the crash certainly cuts requests the destination received and the sender never recorded.
 */

/** The destination's name in the destinations file. */
export const FORWARD_DESTINATION = 'crm';
/** `whsec_` + base64: the Standard Webhooks form, which the `standardwebhooks` library takes as is. */
export const FORWARD_SECRET = `whsec_${Buffer.from('cluster-crash-forward-secret-32b').toString('base64')}`;
/** The class of the destinations' advisory locks (src/runtime/cluster/forwarder.ts FORWARD_LOCK_CLASS, "cfFW"). */
const FORWARD_LOCK_CLASS = 0x63664657;

/** One request the destination got. */
export interface Arrival {
  /** Arrival order (when its headers came in), from 0, and that time. */
  seq: number;
  at: number;
  webhookId: string;
  body: string;
  /** null: verified by both verifiers; else why not. */
  signatureError: string | null;
}

export interface ForwardDestination {
  url: string;
  /** Every request, in arrival order (bodies filled in as they end). */
  readonly arrivals: readonly Arrival[];
  /** Requests received in full and not answered yet (answers are held until {@link release}). */
  held(): number;
  /** Answers the held requests (200) and every later one at once; the webhook-ids that were held. */
  release(): string[];
  close(): Promise<void>;
}

/**
 * The destination: `POST /hooks` answered 200 with an empty body. Each request is verified by both
 * the receiver's own verifier (domain/forwarding/standard-webhooks.ts) and the `standardwebhooks`
 * library, the one a lender uses: a signing bug both sides share would pass the first alone.
 */
export async function startDestination(): Promise<ForwardDestination> {
  const arrivals: Arrival[] = [];
  const library = new Webhook(FORWARD_SECRET);
  let holding: { arrival: Arrival; answer: () => void }[] | null = [];
  const server: Server = createServer((req, res) => {
    const arrival: Arrival = {
      seq: arrivals.length,
      at: Date.now(),
      webhookId: header(req, 'webhook-id'),
      body: '',
      signatureError: 'body not received',
    };
    arrivals.push(arrival);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      arrival.body = Buffer.concat(chunks).toString('utf8');
      arrival.signatureError = verify(req, arrival.body, library);
      const answer = () => res.writeHead(200, { 'content-length': '0' }).end();
      if (holding === null) answer();
      else holding.push({ arrival, answer });
    });
  });
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    arrivals,
    held: () => holding?.length ?? 0,
    release: () => {
      const held = holding ?? [];
      holding = null;
      for (const h of held) h.answer();
      return held.map((h) => h.arrival.webhookId);
    },
    close: () =>
      new Promise<void>((done) => {
        server.close(() => done());
        server.closeAllConnections();
      }),
  };
}

function header(req: IncomingMessage, name: string): string {
  const v = req.headers[name];
  return typeof v === 'string' ? v : '';
}

function verify(req: IncomingMessage, body: string, library: Webhook): string | null {
  const headers = {
    'webhook-id': header(req, 'webhook-id'),
    'webhook-timestamp': header(req, 'webhook-timestamp'),
    'webhook-signature': header(req, 'webhook-signature'),
  };
  const own = verifyStandardWebhook({
    headers,
    body,
    secrets: [FORWARD_SECRET],
    nowSeconds: Math.floor(Date.now() / 1000),
  });
  let theirs: string | null = null;
  try {
    library.verify(body, headers);
  } catch (err) {
    theirs = `standardwebhooks: ${(err as Error).message}`;
  }
  const verdicts = [own.ok ? null : `receiver's verifier: ${own.reason}`, theirs].filter((v) => v !== null);
  return verdicts.length === 0 ? null : verdicts.join(', ');
}

/** Of `ids`, those received fewer than twice (held at a SIGKILL, each must come again from the next sender). */
export function notReceivedAgain(arrivals: readonly Arrival[], ids: readonly string[]): number {
  const wanted = new Map(ids.map((id) => [id, 0]));
  for (const a of arrivals) {
    const n = wanted.get(a.webhookId);
    if (n !== undefined) wanted.set(a.webhookId, n + 1);
  }
  return [...wanted.values()].filter((n) => n < 2).length;
}

/** Copies of an already received webhook-id that arrived before `t` (re-sends caused by what happened before it). */
export function resentCopiesBefore(arrivals: readonly Arrival[], t: number): number {
  const seen = new Set<string>();
  let n = 0;
  for (const a of arrivals) {
    if (seen.has(a.webhookId) && a.at < t) n += 1;
    seen.add(a.webhookId);
  }
  return n;
}

/** Writes the destinations file every replica is given (`DESTINATIONS_FILE`); its path. */
export function writeDestinationsFile(dir: string, url: string): string {
  const path = join(dir, 'destinations.json');
  const destination = { name: FORWARD_DESTINATION, url, secret: FORWARD_SECRET, types: ['proposal.changed'] };
  writeFileSync(path, JSON.stringify({ destinations: [destination] }, null, 2));
  return path;
}

/**
 * The replica holding the destination's advisory lock now (each names its lock connection
 * `consig-receiver:<REPLICA_ID>:forwarder`), or null when none does.
 */
export async function forwardHolder(client: Client): Promise<string | null> {
  const { rows } = await client.query<{ application_name: string }>(
    `SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1 AND l.objsubid = 2
       AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    [FORWARD_LOCK_CLASS],
  );
  const name = rows[0]?.application_name ?? '';
  return /^consig-receiver:(.+):forwarder$/.exec(name)?.[1] ?? null;
}

/** A change of holder seen by {@link watchHolder}: who (null: nobody) from when. */
export interface HolderChange {
  at: number;
  holder: string | null;
}

/**
 * Samples the holder every 200 ms until stopped, on a connection of its own (re-opened after
 * PostgreSQL's restart: samples it cannot take are skipped, not counted as "nobody").
 */
export function watchHolder(connect: () => Promise<Client>) {
  const changes: HolderChange[] = [];
  let running = true;
  const done = (async () => {
    let client: Client | null = null;
    while (running) {
      try {
        client ??= await connect();
        const holder = await forwardHolder(client);
        if (changes.length === 0 || changes.at(-1)?.holder !== holder)
          changes.push({ at: Date.now(), holder });
      } catch {
        await client?.end().catch(() => undefined);
        client = null;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    await client?.end().catch(() => undefined);
  })();
  return {
    changes,
    stop: async () => {
      running = false;
      await done;
    },
  };
}

/** Pending deliveries now (-1 when the query failed). */
export async function pendingDeliveries(client: Client): Promise<number> {
  const { rows } = await client
    .query<{ n: number }>("SELECT count(*)::int AS n FROM forward_deliveries WHERE status = 'pending'")
    .catch(() => ({ rows: [{ n: -1 }] }));
  return rows[0]?.n ?? -1;
}

/** Forwarding after the run: PostgreSQL's outbox against what the destination received. */
export interface ForwardChecks {
  /** forward_messages rows, and those of type proposal.changed (must equal `transitions`). */
  outboxMessages: number;
  proposalChangedMessages: number;
  /** (event, type) pairs with more than one message (must be 0; UNIQUE forbids it). */
  outboxDuplicateTypes: number;
  /** Transitions without a proposal.changed message, plus such messages without a transition (must be 0). */
  outboxMismatches: number;
  /** Order keys whose messages, by id, do not follow their events' ids (must be 0: the outbox follows processing). */
  outboxOrderViolations: number;
  /** forward_deliveries rows by status; messages without a row for the destination (must be 0). */
  forwardDelivered: number;
  forwardPending: number;
  forwardDead: number;
  forwardMissingRows: number;
  /** Attempts recorded, by outcome (a temporary one means the 200 did not reach the sender in time). */
  forwardAttempts: Record<string, number>;
  /** Requests the destination got, distinct webhook-ids among them. */
  forwardReceived: number;
  forwardReceivedIds: number;
  /** webhook-ids received more than once, and the copies beyond the first (allowed: at-least-once). */
  forwardResentIds: number;
  forwardResentCopies: number;
  /** Messages the destination never received (must be 0). */
  forwardLost: number;
  /** Received webhook-ids that are no message of the outbox (must be 0). */
  forwardUnknown: number;
  /** Messages with more 200 attempts recorded than requests received (must be 0). */
  forwardPhantomAttempts: number;
  /** Order keys whose messages' first arrivals are not in id order (must be 0), with examples. */
  forwardOrderViolations: number;
  forwardOrderSamples: string[];
  /** Requests whose signature did not verify (must be 0), with examples. */
  forwardBadSignatures: number;
  forwardSignatureSamples: string[];
  /**
   * Requests whose body is not their message: body id ≠ webhook-id, type, event_id or nu_proposta
   * unlike the stored message, or copies of one webhook-id with different bytes (must be 0).
   */
  forwardBodyMismatches: number;
  /** Requests carrying a CPF in full (the destination did not ask for `full_cpf`: must be 0). */
  forwardCpfUnmasked: number;
}

interface MessageRow {
  id: number;
  webhook_id: string;
  type: string;
  event_id: number;
  nu_proposta: string | null;
  order_key: string;
  status: string | null;
  ok_attempts: number;
  /** Its event's received_at (ms): with the event id, the order events are processed in. */
  received_ms: number;
}

/** Reads the outbox (after the replicas stopped) and checks it and the destination's record. */
export async function checkForwarding(
  client: Client,
  destination: ForwardDestination,
  fullCpfs: readonly string[],
): Promise<ForwardChecks> {
  const q = async <T>(sql: string, params: unknown[] = []): Promise<T[]> =>
    (await client.query(sql, params)).rows as T[];
  const messages = await q<MessageRow>(
    `SELECT m.id::float8 AS id, m.webhook_id, m.type, m.event_id::float8 AS event_id, m.nu_proposta, m.order_key,
       d.status, (SELECT count(*)::int FROM forward_attempts a WHERE a.delivery_id = d.id AND a.http_status = 200) AS ok_attempts,
       extract(epoch FROM coalesce(e.order_at, e.received_at))::float8 * 1000 AS received_ms
     FROM forward_messages m JOIN events e ON e.id = m.event_id
       LEFT JOIN forward_deliveries d ON d.message_id = m.id AND d.destination = $1
     ORDER BY m.id`,
    [FORWARD_DESTINATION],
  );
  const [outbox] = await q<{ dup: number; mismatches: number }>(
    `SELECT (SELECT count(*)::int FROM (SELECT 1 FROM forward_messages GROUP BY event_id, type HAVING count(*) > 1) x) AS dup,
       (SELECT count(*)::int FROM proposal_transitions t WHERE NOT EXISTS (SELECT 1 FROM forward_messages m
          WHERE m.event_id = t.event_id AND m.type = 'proposal.changed'))
       + (SELECT count(*)::int FROM forward_messages m WHERE m.type = 'proposal.changed' AND NOT EXISTS
          (SELECT 1 FROM proposal_transitions t WHERE t.event_id = m.event_id)) AS mismatches`,
  );
  const attempts = await q<{ outcome: string; n: number }>(
    'SELECT outcome, count(*)::int AS n FROM forward_attempts GROUP BY outcome ORDER BY outcome',
  );
  const status = (s: string) => messages.filter((m) => m.status === s).length;
  return {
    outboxMessages: messages.length,
    proposalChangedMessages: messages.filter((m) => m.type === 'proposal.changed').length,
    outboxDuplicateTypes: outbox?.dup ?? -1,
    outboxMismatches: outbox?.mismatches ?? -1,
    outboxOrderViolations: outboxOrder(messages),
    forwardDelivered: status('delivered'),
    forwardPending: status('pending'),
    forwardDead: status('dead'),
    forwardMissingRows: messages.filter((m) => m.status === null).length,
    forwardAttempts: Object.fromEntries(attempts.map((a) => [a.outcome, a.n])),
    ...received(messages, destination.arrivals, fullCpfs),
  };
}

/**
 * Order keys whose messages by id do not follow their events' processing order: received_at, then
 * id (docs/cluster.md §10; an event's several messages share its place).
 */
function outboxOrder(messages: readonly MessageRow[]): number {
  const last = new Map<string, MessageRow>();
  const bad = new Set<string>();
  for (const m of messages) {
    const p = last.get(m.order_key);
    const before =
      p !== undefined &&
      (p.received_ms > m.received_ms || (p.received_ms === m.received_ms && p.event_id >= m.event_id));
    if (before && p.event_id !== m.event_id) bad.add(m.order_key);
    last.set(m.order_key, m);
  }
  return bad.size;
}

/** What the destination received against the outbox. */
function received(
  messages: readonly MessageRow[],
  arrivals: readonly Arrival[],
  fullCpfs: readonly string[],
) {
  const byId = new Map(messages.map((m) => [m.webhook_id, m]));
  const copies = new Map<string, Arrival[]>();
  for (const a of arrivals) copies.set(a.webhookId, [...(copies.get(a.webhookId) ?? []), a]);
  const badSignatures = arrivals.filter((a) => a.signatureError !== null);
  let resentIds = 0;
  let resentCopies = 0;
  for (const list of copies.values()) {
    if (list.length > 1) resentIds += 1;
    resentCopies += list.length - 1;
  }
  const order = arrivalOrder(messages, copies);
  return {
    forwardReceived: arrivals.length,
    forwardReceivedIds: copies.size,
    forwardResentIds: resentIds,
    forwardResentCopies: resentCopies,
    forwardLost: messages.filter((m) => !copies.has(m.webhook_id)).length,
    forwardUnknown: [...copies.keys()].filter((id) => !byId.has(id)).length,
    forwardPhantomAttempts: messages.filter((m) => m.ok_attempts > (copies.get(m.webhook_id)?.length ?? 0))
      .length,
    forwardOrderViolations: order.violations,
    forwardOrderSamples: order.samples,
    forwardBadSignatures: badSignatures.length,
    forwardSignatureSamples: badSignatures.slice(0, 3).map((a) => `${a.webhookId}: ${a.signatureError}`),
    forwardBodyMismatches: arrivals.filter((a) => !bodyMatches(a, byId.get(a.webhookId), copies)).length,
    forwardCpfUnmasked: arrivals.filter((a) => fullCpfs.some((cpf) => containsCpf(a.body, cpf))).length,
  };
}

/**
 * Per order key, the messages in id order must have increasing first arrivals (docs/forwarding.md "Order":
 * a message waits until every earlier one of its proposal is delivered). Re-sends may come later;
 * only the first arrival of each counts. Messages never received are the loss check's.
 */
function arrivalOrder(messages: readonly MessageRow[], copies: ReadonlyMap<string, Arrival[]>) {
  const lines = new Map<string, { id: number; first: number }[]>();
  for (const m of messages) {
    const first = copies.get(m.webhook_id)?.[0]?.seq;
    if (first === undefined) continue;
    lines.set(m.order_key, [...(lines.get(m.order_key) ?? []), { id: m.id, first }]);
  }
  let violations = 0;
  const samples: string[] = [];
  for (const [key, line] of lines) {
    const i = line.findIndex((x, j) => j > 0 && x.first < (line[j - 1] as { first: number }).first);
    if (i === -1) continue;
    violations += 1;
    const [a, b] = [line[i - 1], line[i]] as { id: number; first: number }[];
    if (samples.length < 3)
      samples.push(`${key}: message ${a?.id} arrived #${a?.first}, after message ${b?.id} (#${b?.first})`);
  }
  return { violations, samples };
}

function bodyMatches(a: Arrival, m: MessageRow | undefined, copies: ReadonlyMap<string, Arrival[]>): boolean {
  if (m === undefined) return true; // counted as unknown
  if (copies.get(a.webhookId)?.[0]?.body !== a.body) return false;
  try {
    const body = JSON.parse(a.body) as { id?: unknown; type?: unknown; data?: Record<string, unknown> };
    return (
      body.id === a.webhookId &&
      body.type === m.type &&
      body.data?.event_id === m.event_id &&
      String(body.data?.nu_proposta) === m.nu_proposta
    );
  } catch {
    return false;
  }
}

/** The CPF's 11 digits anywhere in the body, bare or punctuated (`123.456.789-09`). */
function containsCpf(body: string, cpf: string): boolean {
  const punctuated = `${cpf.slice(0, 3)}.${cpf.slice(3, 6)}.${cpf.slice(6, 9)}-${cpf.slice(9)}`;
  return body.includes(cpf) || body.includes(punctuated);
}
