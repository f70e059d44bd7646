import Database from '../../src/sqlite/sqlite-driver';
import { sign } from '../../src/domain/signature';
import { type ServerPath, startTestApp, type TestApp } from '../helpers/app';
import { delivery, SECRET } from '../helpers/payloads';
import { openRaw, rawRequest, type RawResponse, requestBytes, sleep } from '../helpers/raw-http';

/**
 * Every row of the contract §4 response table (and its extra rows, docs/operating.md: aborted, forbidden),
 * sent over real loopback HTTP to the server production runs (createHttpServer: the webhook fast
 * path before Express), each checking the answer and what was stored. The table was once tested
 * only through the Express app, which production does not send `POST /webhooks` through.
 */

const MAX_BODY_BYTES = 4096;

const bytes = (value: unknown) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value));

const NEW = bytes(delivery('proposta.aprovada', { webhook_id: 'wh_new', nu_proposta: 101 }));
const RETRY = bytes(delivery('proposta.aprovada', { webhook_id: 'wh_new', nu_proposta: 101, tentativa: 2 }));
const UNKNOWN_EVENTO = bytes(delivery('proposta.reativada', { webhook_id: 'wh_unknown', nu_proposta: 102 }));
const REGISTRY = bytes({ requestId: 'req-1', status: 'completed' });
const LOCKED = bytes(delivery('proposta.criada', { webhook_id: 'wh_locked', nu_proposta: 103 }));
const TOO_LARGE = bytes({ ...delivery('proposta.criada', { webhook_id: 'wh_big' }), pad: 'x'.repeat(5000) });
const CUT_OFF = bytes(delivery('proposta.criada', { webhook_id: 'wh_cut', nu_proposta: 104 }));

const QUARANTINED: [string, Buffer, string][] = [
  ['not JSON', Buffer.from('definitely not json'), 'body is not JSON'],
  ['not an object', Buffer.from('[{"evento":"proposta.aprovada"}]'), 'body is not a JSON object'],
  [
    'neither an event nor a registry result',
    Buffer.from('{"hello":"world"}'),
    'neither an event (`evento`) nor a registry result (`requestId` and `status`)',
  ],
  ['invalid UTF-8', Buffer.from([0x7b, 0x22, 0xc3, 0x28, 0x22, 0x3a, 0x31, 0x7d]), 'body is not valid UTF-8'],
];

const BAD_SIGNATURES: [string, string | null, string][] = [
  ['missing', null, 'missing'],
  ['malformed', `sha256=${'g'.repeat(64)}`, 'malformed'],
  ['wrong', sign('not-the-secret', NEW), 'mismatch'],
];

/** One signed (unless told otherwise) POST on a fresh connection, exact bytes on the wire. */
function post(
  t: TestApp,
  raw: Buffer,
  opts: { path?: string; signature?: string | null } = {},
): Promise<RawResponse | null> {
  const signature = opts.signature === undefined ? sign(SECRET, raw) : opts.signature;
  const headers: [string, string][] = [['Content-Type', 'application/json']];
  if (signature !== null) headers.push(['X-Service-Signature', signature]);
  return rawRequest(t.url, { path: opts.path ?? '/webhooks', headers, body: raw });
}

/** Sends half of `raw`, waits until the server has taken the request, then resets the connection. */
async function postAndVanish(t: TestApp, raw: Buffer): Promise<RawResponse | null> {
  const conn = await openRaw(t.url);
  const taken = new Promise((resolve) => t.server.once('request', resolve));
  const head = requestBytes(t.url, {
    path: '/webhooks',
    headers: [
      ['X-Service-Signature', sign(SECRET, raw)],
      ['Content-Length', String(raw.length)],
    ],
  });
  await conn.write(Buffer.concat([head, raw.subarray(0, raw.length >> 1)]));
  await taken;
  conn.close();
  return conn.response;
}

/** Posts while another connection holds the write lock (SQLITE_BUSY), then lets go. */
async function postWhileLocked(t: TestApp, raw: Buffer): Promise<RawResponse | null> {
  const other = new Database(t.dbPath);
  try {
    other.exec('BEGIN IMMEDIATE');
    return await post(t, raw);
  } finally {
    if (other.inTransaction) other.exec('ROLLBACK');
    other.close();
  }
}

interface Row {
  /** The row of the table: the case and its answer. */
  name: string;
  env?: Record<string, string>;
  /** Sends the row's request(s); the answer to the last one (null: none came). */
  send(t: TestApp): Promise<RawResponse | null>;
  answer: { status: number; body: Record<string, unknown>; headers?: Record<string, string> } | null;
  /** The `events` rows afterwards (these columns, exactly; none: nothing stored). */
  events: Record<string, unknown>[];
  /** The `deliveries` rows afterwards (these columns, exactly). */
  deliveries: Record<string, unknown>[];
}

const delivered = (over: Record<string, unknown>) => ({
  path: '/webhooks',
  http_status: 200,
  dedup_key: null,
  event_id: null,
  secret_index: null,
  detail: null,
  ...over,
});

/** The deliveries row of a request whose event is stored (answered 200): event 1, the first secret. */
const storedAs = (outcome: string, raw: Buffer, over: Record<string, unknown> = {}) =>
  delivered({ outcome, event_id: 1, secret_index: 0, body_bytes: raw.length, ...over });

const ROWS: Row[] = [
  {
    name: 'new, valid, signed → 200 accepted; an event row, status pending, body byte-exact',
    send: (t) => post(t, NEW),
    answer: { status: 200, body: { status: 'accepted', event_id: 1 } },
    events: [
      { dedup_key: 'wh_new', kind: 'event', evento: 'proposta.aprovada', status: 'pending', body: NEW },
    ],
    deliveries: [storedAs('accepted', NEW, { dedup_key: 'wh_new' })],
  },
  {
    name: 'same dedup key seen before → 200 duplicate; nothing new, the duplicates counter +1',
    send: async (t) => {
      await post(t, NEW);
      return post(t, RETRY);
    },
    answer: { status: 200, body: { status: 'duplicate', event_id: 1 } },
    events: [{ dedup_key: 'wh_new', status: 'pending', duplicates: 1, body: NEW }],
    deliveries: [
      storedAs('accepted', NEW, { dedup_key: 'wh_new' }),
      storedAs('duplicate', RETRY, { dedup_key: 'wh_new' }),
    ],
  },
  {
    name: 'signed, known shape, unknown evento → 200 accepted; an event row, status ignored',
    send: (t) => post(t, UNKNOWN_EVENTO),
    answer: { status: 200, body: { status: 'accepted', event_id: 1 } },
    events: [
      { dedup_key: 'wh_unknown', evento: 'proposta.reativada', status: 'ignored', body: UNKNOWN_EVENTO },
    ],
    deliveries: [storedAs('accepted', UNKNOWN_EVENTO, { dedup_key: 'wh_unknown' })],
  },
  {
    name: 'a registry result on POST /webhooks/registry → 200 accepted; a registry row, status pending',
    send: (t) => post(t, REGISTRY, { path: '/webhooks/registry' }),
    answer: { status: 200, body: { status: 'accepted', event_id: 1 } },
    events: [
      { dedup_key: 'registry:req-1:completed', kind: 'registry', request_id: 'req-1', status: 'pending' },
    ],
    deliveries: [
      storedAs('accepted', REGISTRY, { path: '/webhooks/registry', dedup_key: 'registry:req-1:completed' }),
    ],
  },
  {
    name: 'no evento but requestId and status on POST /webhooks → 200 accepted as a registry result',
    send: (t) => post(t, REGISTRY),
    answer: { status: 200, body: { status: 'accepted', event_id: 1 } },
    events: [{ dedup_key: 'registry:req-1:completed', kind: 'registry', status: 'pending' }],
    deliveries: [storedAs('accepted', REGISTRY, { dedup_key: 'registry:req-1:completed' })],
  },
  ...QUARANTINED.map(([what, raw, reason]): Row => ({
    name: `signed but ${what} → 200 quarantined; an event row, status invalid, raw bytes kept`,
    send: (t) => post(t, raw),
    answer: { status: 200, body: { status: 'quarantined', event_id: 1, reason } },
    events: [{ status: 'invalid', evento: null, last_error: reason, body: raw }],
    deliveries: [
      storedAs('quarantined', raw, {
        dedup_key: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
        detail: reason,
      }),
    ],
  })),
  ...BAD_SIGNATURES.map(([what, signature, reason]): Row => ({
    name: `signature ${what} → 401 invalid_signature; no event, a deliveries row without the body`,
    send: (t) => post(t, NEW, { signature }),
    answer: { status: 401, body: { error: 'invalid_signature', message: expect.any(String) } },
    events: [],
    deliveries: [
      delivered({ outcome: 'invalid_signature', http_status: 401, body_bytes: NEW.length, detail: reason }),
    ],
  })),
  {
    name: 'body over MAX_BODY_BYTES → 413 payload_too_large + Connection: close; a deliveries row only',
    send: (t) => post(t, TOO_LARGE),
    answer: {
      status: 413,
      body: { error: 'payload_too_large', message: `body exceeds MAX_BODY_BYTES (${MAX_BODY_BYTES} bytes)` },
      headers: { connection: 'close' },
    },
    events: [],
    deliveries: [
      delivered({
        outcome: 'payload_too_large',
        http_status: 413,
        body_bytes: TOO_LARGE.length,
        detail: 'entity.too.large',
      }),
    ],
  },
  {
    name: 'the write itself failed (database locked) → 503 storage_unavailable + Retry-After; no event',
    send: (t) => postWhileLocked(t, LOCKED),
    answer: {
      status: 503,
      body: { error: 'storage_unavailable', message: expect.any(String) },
      headers: { 'retry-after': '5' },
    },
    events: [],
    // Written once the disk takes writes again.
    deliveries: [
      delivered({
        outcome: 'storage_unavailable',
        http_status: 503,
        dedup_key: 'wh_locked',
        secret_index: 0,
        body_bytes: LOCKED.length,
        detail: 'database is locked',
      }),
    ],
  },
  {
    name: 'body cut off before its end (the client went away) → no event, an aborted deliveries row',
    send: (t) => postAndVanish(t, CUT_OFF),
    answer: null,
    events: [],
    deliveries: [
      delivered({
        outcome: 'aborted',
        http_status: 400,
        body_bytes: CUT_OFF.length,
        detail: 'request.aborted',
      }),
    ],
  },
  {
    name: 'address not in ALLOWED_CIDRS → 403 forbidden + Connection: close; a deliveries row only',
    env: { ALLOWED_CIDRS: '10.0.0.0/8' },
    send: (t) => post(t, NEW),
    answer: {
      status: 403,
      body: { error: 'forbidden', message: expect.any(String) },
      headers: { connection: 'close' },
    },
    events: [],
    deliveries: [
      delivered({ outcome: 'forbidden', http_status: 403, body_bytes: null, detail: 'not in ALLOWED_CIDRS' }),
    ],
  },
];

interface Seen {
  answer: { status: number; headers: Record<string, string>; body: unknown } | null;
  events: Record<string, unknown>[];
  deliveries: Record<string, unknown>[];
}

/** The answer a row gets on a fresh receiver of the given path, and what that receiver stored. */
async function observe(row: Row, path: ServerPath): Promise<Seen> {
  const t = await startTestApp({ MAX_BODY_BYTES: String(MAX_BODY_BYTES), ...row.env }, { path });
  try {
    const res = await row.send(t);
    await auditRowsWritten(t, row.deliveries.length);
    const { 'content-type': type, connection, 'retry-after': retryAfter } = res?.headers ?? {};
    const headers = { 'content-type': type, connection, 'retry-after': retryAfter };
    return {
      answer: res && { status: res.status, headers: JSON.parse(JSON.stringify(headers)), body: res.json },
      events: t.store.db
        .prepare(
          `SELECT dedup_key, kind, evento, request_id, status, duplicates, last_error, CAST(body AS BLOB) AS body
           FROM events ORDER BY id`,
        )
        .all() as Record<string, unknown>[],
      deliveries: t.store.db
        .prepare(
          `SELECT path, outcome, http_status, dedup_key, event_id, body_bytes, secret_index, detail
           FROM deliveries ORDER BY id`,
        )
        .all() as Record<string, unknown>[],
    };
  } finally {
    await t.close();
  }
}

/**
 * Audit rows go with the writer's next batch, and an aborted request is seen only when the server
 * notices the client left: flush until `n` rows are there (bounded; the test fails on the rows).
 */
async function auditRowsWritten(t: TestApp, n: number): Promise<void> {
  const count = t.store.db.prepare<[], { n: number }>('SELECT count(*) AS n FROM deliveries');
  for (let i = 0; i < 500; i++) {
    t.writer.flush();
    if ((count.get()?.n ?? 0) >= n) return;
    await sleep(10);
  }
}

describe('the contract §4 table holds on the path production uses', () => {
  it.each(ROWS.map((row) => [row.name, row] as const))('%s', async (_name, row) => {
    const seen = await observe(row, 'production');
    if (row.answer === null) {
      expect(seen.answer).toBeNull();
    } else {
      expect(seen.answer?.status).toBe(row.answer.status);
      expect(seen.answer?.body).toEqual(row.answer.body);
      expect(seen.answer?.headers).toMatchObject({
        'content-type': 'application/json; charset=utf-8',
        ...row.answer.headers,
      });
    }
    expect(seen.events).toEqual(row.events.map((e) => expect.objectContaining(e)));
    expect(seen.deliveries).toEqual(row.deliveries);
  });

  it('the Express app and the fast path answer every row alike and store the same rows', async () => {
    for (const row of ROWS) {
      const production = await observe(row, 'production');
      const express = await observe(row, 'express');
      expect({ row: row.name, ...express }).toEqual({ row: row.name, ...production });
    }
  });
});
