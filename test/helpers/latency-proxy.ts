import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy on loopback that delays every chunk by `delayMs` in each direction: a replica whose
 * DATABASE_URL goes through it sees PostgreSQL as a replica in another zone does (each statement
 * costs two delays), so its relay reaches PostgreSQL later than the others'. It can also stall
 * the link (a congested or briefly partitioned network): while paused, chunks are held, and on
 * resume they go in the order they came. Order is kept (timers of one duration fire in the order
 * they were set).
 */
export interface LatencyProxy {
  /** `url` with its port replaced by the proxy's. */
  through(url: string): string;
  /** Holds every chunk, both ways, until {@link resume}. */
  pause(): void;
  /** How many chunks a pause holds now (those containing `text`, when given: a statement caught mid-flight). */
  held(text?: string): number;
  /**
   * Loses one COMMIT's answer: the next connection that sends `after` has its next COMMIT passed on
   * to PostgreSQL (which commits it), then the link cut both ways before the answer comes back. The
   * client sees its connection lost in the middle of a COMMIT that did happen. Resolves once cut.
   */
  loseCommitAnswer(after: string): Promise<void>;
  resume(): void;
  close(): Promise<void>;
}

export async function startLatencyProxy(
  target: { host: string; port: number },
  delayMs: number,
): Promise<LatencyProxy> {
  const sockets = new Set<Socket>();
  let paused = false;
  /** Chunks that came while paused, each with the write that sends it on. */
  const held: { chunk: Buffer | null; send: () => void }[] = [];
  const later = (send: () => void, chunk: Buffer | null = null) => {
    if (paused) held.push({ chunk, send });
    else setTimeout(send, delayMs);
  };
  const track = (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => s.destroy());
  };
  const pipe = (from: Socket, to: Socket) => {
    from.on('data', (chunk: Buffer) => later(() => to.writable && to.write(chunk), chunk));
    from.on('end', () => later(() => to.end()));
  };
  /** The armed loseCommitAnswer: what arms a connection, and what to call once it is cut. */
  let lose: { after: string; cut: () => void } | null = null;
  const server: Server = createServer((client) => {
    const upstream = connect(target.port, target.host);
    track(client);
    track(upstream);
    pipe(upstream, client);
    // Client to server, watching for the armed COMMIT.
    let armed = false;
    let cut = false;
    client.on('data', (chunk: Buffer) => {
      const target = lose;
      if (target !== null && !armed && chunk.includes(target.after)) armed = true;
      else if (target !== null && armed && chunk.includes('COMMIT\0')) {
        lose = null;
        cut = true;
        // The COMMIT goes on, then the end of the stream: PostgreSQL reads and commits it before it
        // sees the end. Its answer is never read; the client's socket goes at once.
        later(() => {
          upstream.end(chunk);
          client.destroy();
          target.cut();
        });
        return;
      }
      later(() => upstream.writable && upstream.write(chunk), chunk);
    });
    client.on('end', () => later(() => upstream.end()));
    // A cut connection's upstream is left to finish the COMMIT it was given, then closed.
    client.on('close', () => (cut ? setTimeout(() => upstream.destroy(), 1000) : upstream.destroy()));
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  return {
    through: (url) => {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    pause: () => {
      paused = true;
    },
    held: (text) => held.filter((h) => text === undefined || h.chunk?.includes(text) === true).length,
    loseCommitAnswer: (after) =>
      new Promise<void>((resolve) => {
        lose = { after, cut: resolve };
      }),
    resume: () => {
      paused = false;
      for (const { send } of held.splice(0)) setTimeout(send, delayMs);
    },
    close: async () => {
      paused = false;
      held.length = 0;
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
