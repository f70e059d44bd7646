import { createServer } from 'node:http';

/**
 * Bench target 1: the floor. A bare `node:http` server that reads the whole body and answers 200,
 * with no verification and no storage. Listens on HOST:PORT.
 */

const answer = Buffer.from(JSON.stringify({ status: 'accepted' }));

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    if (Buffer.concat(chunks).length === 0) {
      res.writeHead(400).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(answer.length) });
    res.end(answer);
  });
});

server.listen(Number(process.env.PORT), process.env.HOST ?? '127.0.0.1');
