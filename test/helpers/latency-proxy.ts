import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy on loopback that delays every chunk by `delayMs` in each direction: a replica whose
 * DATABASE_URL goes through it sees PostgreSQL as a replica in another zone does (each statement
 * costs two delays), so its relay reaches PostgreSQL later than the others'. Order is kept (timers
 * of one duration fire in the order they were set).
 */
export interface LatencyProxy {
  /** `url` with its port replaced by the proxy's. */
  through(url: string): string;
  close(): Promise<void>;
}

export async function startLatencyProxy(
  target: { host: string; port: number },
  delayMs: number,
): Promise<LatencyProxy> {
  const sockets = new Set<Socket>();
  const track = (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => s.destroy());
  };
  const pipe = (from: Socket, to: Socket) => {
    from.on('data', (chunk) => void setTimeout(() => to.writable && to.write(chunk), delayMs));
    from.on('end', () => void setTimeout(() => to.end(), delayMs));
  };
  const server: Server = createServer((client) => {
    const upstream = connect(target.port, target.host);
    track(client);
    track(upstream);
    pipe(client, upstream);
    pipe(upstream, client);
    client.on('close', () => upstream.destroy());
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
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
