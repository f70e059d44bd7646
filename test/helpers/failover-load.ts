import { Agent, request } from 'node:http';
import type { Evento } from '../../src/domain/catalogue';
import { EVENT_EFFECTS } from '../../src/domain/lifecycle';
import { seededRandom } from '../../src/domain/random';
import { CPFS, PATHS } from '../../rigs/deliveries';
import { HOST, sleep } from '../../rigs/harness';
import { signed } from './payloads';

/**
 * The service's side of the failover test (issue 32): signed life-cycle deliveries at a steady rate,
 * round-robin over the replicas, each proposal's events one after the other (the next once the
 * previous was answered 200, as the service sends), a failed request retried at the next replica
 * with backoff. Every request's answer and time is recorded. And a change-feed reader that follows
 * `/admin/feed` from its cursor, as a lender's puller does, through whatever happens to PostgreSQL.
 */

/** The life-cycle windows rigs/cluster-crash.ts sends (no evento twice in one proposal), chosen here uniformly. */
const WINDOWS: readonly (readonly Evento[])[] = PATHS.map((p) => p.eventos);

export interface LoadProposal {
  nu: number;
  uuid: string;
  cpf: string;
  eventos: readonly Evento[];
  /** The webhook_ids of its events, in the order sent. */
  keys: string[];
  next: number;
  busy: boolean;
}

/** One webhook_id: what it carried and what its requests got. */
export interface SentDelivery {
  key: string;
  proposal: LoadProposal;
  step: number;
  evento: Evento;
  /** When a replica answered it 200 (null: never). */
  ackedAt: number | null;
}

export interface Answer {
  replica: number;
  start: number;
  ms: number;
  /** 0: no answer (refused, reset, timed out). */
  status: number;
  /** Without an answer: the error's code, `reused` when on a kept-alive socket the server may have just closed. */
  error?: string;
  /**
   * A reset on a kept-alive socket before any answer: the server closed it as idle just as the
   * request went out (HTTP keep-alive's race, which Node's documentation says to retry). Sent again
   * at once on a new connection, and not counted as a request without an answer.
   */
  keepAliveRace?: boolean;
}

export interface Load {
  readonly proposals: LoadProposal[];
  readonly sent: Map<string, SentDelivery>;
  readonly answers: Answer[];
  /** Resolves once the rate's last delivery is answered 200 (or out of attempts). */
  readonly done: Promise<void>;
  /** When the load stopped handing out new deliveries. */
  endedAt(): number | null;
}

export interface LoadOptions {
  ports: readonly number[];
  secret: string;
  seed: number;
  perSecond: number;
  durationMs: number;
  /** When given, the load also goes on until it settles (a scenario's steps, run under the load). */
  until?: Promise<unknown>;
}

/** Starts the load now; see {@link Load}. */
export function startLoad(options: LoadOptions): Load {
  const rng = seededRandom(options.seed);
  const state: Load & { ended: number | null } = {
    proposals: [],
    sent: new Map(),
    answers: [],
    done: Promise.resolve(),
    ended: null,
    endedAt: () => state.ended,
  };
  const agents = options.ports.map(() => new Agent({ keepAlive: true, maxSockets: 64 }));
  const open: LoadProposal[] = [];
  const inFlight = new Set<Promise<void>>();
  let settled = options.until === undefined;
  const settle = () => (settled = true);
  void options.until?.then(settle, settle);
  const run = async () => {
    const start = Date.now();
    const interval = 1000 / options.perSecond;
    for (let i = 0; Date.now() - start < options.durationMs || !settled; i++) {
      const wait = start + i * interval - Date.now();
      if (wait > 0) await sleep(wait);
      const p = pickProposal(open, state.proposals, rng, options.seed);
      const d = nextDelivery(p, state.sent, options.seed);
      const attempt = deliver(options, agents, state, d, i % options.ports.length).finally(() => {
        inFlight.delete(attempt);
        p.busy = false;
        if (p.next >= p.eventos.length && open.includes(p)) open.splice(open.indexOf(p), 1);
      });
      inFlight.add(attempt);
    }
    state.ended = Date.now();
    while (inFlight.size > 0) await Promise.all([...inFlight]);
    for (const a of agents) a.destroy();
  };
  (state as { done: Promise<void> }).done = run();
  return state;
}

/** A random open proposal with no event in flight, or a new one (about 30 open at a time). */
function pickProposal(open: LoadProposal[], all: LoadProposal[], rng: () => number, seed: number) {
  const ready = open.filter((p) => !p.busy && p.next < p.eventos.length);
  if (ready.length > 0 && (open.length >= 30 || rng() < 0.7))
    return ready[Math.floor(rng() * ready.length)] as LoadProposal;
  const hex = () =>
    Math.floor(rng() * 0x100000000)
      .toString(16)
      .padStart(8, '0');
  const u = `${hex()}${hex()}${hex()}${hex()}`;
  const p: LoadProposal = {
    nu: 30_000_000 + (seed % 1000) * 10_000 + all.length + 1,
    uuid: `${u.slice(0, 8)}-${u.slice(8, 12)}-4${u.slice(13, 16)}-a${u.slice(17, 20)}-${u.slice(20, 32)}`,
    cpf: CPFS[Math.floor(rng() * CPFS.length)] as string,
    eventos: WINDOWS[Math.floor(rng() * WINDOWS.length)] as Evento[],
    keys: [],
    next: 0,
    busy: false,
  };
  all.push(p);
  open.push(p);
  return p;
}

function nextDelivery(p: LoadProposal, sent: Map<string, SentDelivery>, seed: number): SentDelivery {
  const step = p.next;
  p.next += 1;
  p.busy = true;
  const key = `wh_fo_${seed}_${p.nu}_${step}`;
  p.keys.push(key);
  const d: SentDelivery = { key, proposal: p, step, evento: p.eventos[step] as Evento, ackedAt: null };
  sent.set(key, d);
  return d;
}

function bodyOf(d: SentDelivery, tentativa: number): Record<string, unknown> {
  const p = d.proposal;
  const at = new Date(Date.UTC(2026, 10, 21, 13, 0, 0) + (p.nu % 100_000) * 1000 + d.step * 3_600_000);
  return {
    evento: d.evento,
    timestamp: at.toISOString().replace('Z', '-00:00'),
    dados: {
      nu_proposta: p.nu,
      uuid: p.uuid,
      nu_cpf: p.cpf,
      st_proposta: EVENT_EFFECTS[d.evento].status,
      vl_emprestimo: 15000.5,
      no_conveniada: 'Empresa Exemplo Ltda',
    },
    metadata: { tentativa, webhook_id: d.key },
  };
}

/** The chosen replica, then the next one after each failure, with backoff, until a 200 (at most 30 tries). */
async function deliver(
  options: LoadOptions,
  agents: Agent[],
  state: Load,
  d: SentDelivery,
  first: number,
): Promise<void> {
  let replica = first;
  for (let attempt = 1; attempt <= 30; attempt++) {
    const { raw, signature } = signed(bodyOf(d, attempt), options.secret);
    const start = Date.now();
    let { status, error } = await post(
      agents[replica] as Agent,
      options.ports[replica] as number,
      raw,
      signature,
    );
    if (error === 'ECONNRESET reused') {
      state.answers.push({ replica, start, ms: Date.now() - start, status, error, keepAliveRace: true });
      ({ status, error } = await post(false, options.ports[replica] as number, raw, signature));
    }
    state.answers.push({ replica, start, ms: Date.now() - start, status, ...(error ? { error } : {}) });
    if (status === 200) {
      d.ackedAt = Date.now();
      return;
    }
    replica = (replica + 1) % options.ports.length;
    await sleep(Math.min(50 * 2 ** (attempt - 1), 1000));
  }
}

/** POST /webhooks; the status, 0 when there was no answer within 10 s (and why). */
function post(
  agent: Agent | false,
  port: number,
  body: Buffer,
  signature: string,
): Promise<{ status: number; error?: string }> {
  return new Promise((done) => {
    const headers = {
      'content-type': 'application/json',
      'content-length': String(body.length),
      'x-service-signature': signature,
    };
    const req = request(
      { host: HOST, port, path: '/webhooks', method: 'POST', agent, headers, timeout: 10_000 },
      (res) => {
        res.resume();
        res.on('end', () => done({ status: res.statusCode ?? 0 }));
        res.on('error', () => done({ status: 0, error: 'response error' }));
      },
    );
    req.on('timeout', () => req.destroy(Object.assign(new Error('timeout'), { code: 'TIMEOUT' })));
    req.on('error', (err: NodeJS.ErrnoException) =>
      done({ status: 0, error: `${err.code ?? err.message}${req.reusedSocket ? ' reused' : ''}` }),
    );
    req.end(body);
  });
}

// ---------------------------------------------------------------------------------------------
// The change-feed reader
// ---------------------------------------------------------------------------------------------

/** One page the reader got: the cursor it asked after, the messages' ids, the cursor it was given. */
export interface FeedPage {
  after: string | null;
  ids: string[];
  cursor: string;
}

export interface FeedReader {
  readonly pages: FeedPage[];
  /** Every message id read, once each. */
  readonly seen: Set<string>;
  /** Stops at the next empty page. */
  stop(): Promise<void>;
}

/** Follows `/admin/feed` from the start with long-polls, moving to the next replica when one does not answer. */
export function startFeedReader(ports: readonly number[], token: string): FeedReader {
  const pages: FeedPage[] = [];
  const seen = new Set<string>();
  let stopping = false;
  const run = async () => {
    let cursor: string | null = null;
    for (let i = 0; ;) {
      const query: string = `/admin/feed?limit=1000&wait=${stopping ? 0 : 2}${cursor === null ? '' : `&after=${cursor}`}`;
      const page = await feedPage(ports[i % ports.length] as number, query, token);
      if (page === null) {
        i += 1;
        await sleep(200);
        continue;
      }
      if (page.messages.length > 0) {
        pages.push({ after: cursor, ids: page.messages.map((m) => m.id), cursor: page.cursor });
        for (const m of page.messages) seen.add(m.id);
      } else if (stopping) return;
      cursor = page.cursor;
    }
  };
  const done = run();
  return {
    pages,
    seen,
    stop: async () => {
      stopping = true;
      await done;
    },
  };
}

function feedPage(
  port: number,
  path: string,
  token: string,
): Promise<{ messages: { id: string }[]; cursor: string } | null> {
  return new Promise((done) => {
    const headers = { authorization: `Bearer ${token}` };
    const req = request({ host: HOST, port, path, headers, agent: false, timeout: 10_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => {
        try {
          done(res.statusCode === 200 ? JSON.parse(body) : null);
        } catch {
          done(null);
        }
      });
      res.on('error', () => done(null));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', () => done(null));
    req.end();
  });
}
