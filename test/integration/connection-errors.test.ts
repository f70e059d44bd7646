import { createServer, type Server, type Socket } from 'node:net';
import { Pool } from 'pg';
import { connectionSettings } from '../../src/postgres/connection';
import { checkOut } from '../../src/postgres/pg-sql';

/**
 * A connection PostgreSQL ends while it is handed from one caller to the next must not take the
 * process down. node-postgres's pool takes its own 'error' listener off a client it hands out, and a
 * caller of `pool.connect()` can add one only after its await: when the last answer to one query and
 * the server's FATAL (`57P01 terminating connection due to unexpected postmaster exit`, what every
 * backend sends when PostgreSQL is SIGKILLed) arrive in one read, the client changes hands and
 * emits 'error' in between, with nobody listening — an uncaught exception (it failed CI once, in
 * cluster-console's "PostgreSQL away" on Node 26). Every replica's pool makes its clients with an
 * 'error' listener from birth (`connectionSettings().Client`).
 *
 * The server here is a real one on loopback speaking just enough of PostgreSQL's protocol: it
 * answers the first query, and in the same write sends the FATAL and closes.
 */

function message(type: string, body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.write(type, 0, 'latin1');
  head.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([head, body]);
}
const cstr = (s: string) => Buffer.from(`${s}\0`, 'utf8');
const int32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n);
  return b;
};
const ready = () => message('Z', Buffer.from('I'));
const authOk = () => message('R', int32(0));
const commandComplete = () => message('C', cstr('SELECT 0'));
const fatal = () =>
  message(
    'E',
    Buffer.concat([
      Buffer.from('S'),
      cstr('FATAL'),
      Buffer.from('C'),
      cstr('57P01'),
      Buffer.from('M'),
      cstr('terminating connection due to unexpected postmaster exit'),
      Buffer.from([0]),
    ]),
  );

/** A server that lets a client in, answers its first query, and dies in the same write. */
async function dyingServer(): Promise<{ server: Server; port: number }> {
  const server = createServer((socket: Socket) => {
    let started = false;
    let buf = Buffer.alloc(0);
    socket.on('error', () => undefined);
    socket.on('data', (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      for (;;) {
        if (!started) {
          if (buf.length < 4) return;
          const len = buf.readInt32BE(0);
          if (buf.length < len) return;
          buf = buf.subarray(len);
          started = true;
          socket.write(Buffer.concat([authOk(), ready()]));
          continue;
        }
        if (buf.length < 5) return;
        const type = String.fromCharCode(buf[0] as number);
        const len = buf.readInt32BE(1);
        if (buf.length < len + 1) return;
        buf = buf.subarray(len + 1);
        if (type === 'Q') {
          socket.end(Buffer.concat([commandComplete(), ready(), fatal()]));
          return;
        }
        if (type === 'X') socket.end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return { server, port: address.port };
}

let uncaught: unknown[] = [];
const onUncaught = (err: unknown) => uncaught.push(err);

beforeEach(() => {
  uncaught = [];
  process.on('uncaughtException', onUncaught);
});
afterEach(() => {
  process.off('uncaughtException', onUncaught);
});

it('the FATAL read together with the answer, while the client changes hands, fails the next statement and throws nowhere', async () => {
  const { server, port } = await dyingServer();
  const { Client } = connectionSettings();
  const pool = new Pool({ host: '127.0.0.1', port, user: 'u', database: 'd', max: 1, Client });
  pool.on('error', () => undefined);
  try {
    // One connection: the checkout waits for the query's, and takes it the moment the answer is read.
    const first = pool.query('SELECT 1');
    const next = checkOut(pool);
    await expect(first).resolves.toMatchObject({ command: 'SELECT' });
    const client = await next;
    await expect(client.query('SELECT 2')).rejects.toThrow(/not queryable|terminat/i);
    client.release(true);
    // The pool ended: every client's connection closed and all its socket's events were handled, so
    // a throw from one of its handlers has surfaced by now (not after a sleep).
    await pool.end();
    expect(uncaught).toEqual([]);
  } finally {
    await pool.end().catch(() => undefined);
    await new Promise((r) => server.close(r));
  }
});
