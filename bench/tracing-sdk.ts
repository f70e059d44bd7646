import { fork } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { processingAttributes, processingName } from '../src/domain/tracing';
import { startTracing } from '../src/tracing';

/**
 * Tracing's cost without the receiver (docs/benchmark.md "Tracing"): `startTracing` as `serve`
 * starts it (OTLP http/protobuf, the SDK's BatchSpanProcessor and exporter, the SDK's defaults or
 * the OTEL_* variables of this process) and the three spans of one bench delivery (the SERVER span,
 * processing, the lifecycle stage), made at a paced rate and exported to a
 * sink in a child process that reads each export and answers 200. It prints this process's CPU per
 * delivery (user and system, every thread), the spans the queue dropped and what the sink took.
 *
 *   node dist/bench/tracing-sdk.js [deliveries=100000] [per second=10000]
 */

const BURST = 50;

async function main(deliveries: number, rate: number): Promise<void> {
  const sink = fork(__filename, ['--sink']);
  const url = await new Promise<string>((resolve) => sink.once('message', (m) => resolve(String(m))));
  process.env.OTEL_EXPORTER_OTLP_ENDPOINT = url;
  let dropped = 0;
  const tracing = startTracing(
    { protocol: 'http/protobuf', serviceName: 'consig-receiver', serviceVersion: 'bench', replicaId: null },
    { warn: () => undefined, dropped: (_reason, n) => (dropped += n), monotonic: () => performance.now() },
  );
  const { traces } = tracing;
  const delivery = (i: number) => {
    const event = {
      id: i,
      kind: 'event',
      evento: 'proposta.aprovada',
      nuProposta: 100_000 + i,
      requestId: null,
      webhookId: `wh_${i}`,
      attempts: 0,
    };
    const request = traces.request('/webhooks', undefined, undefined);
    request.end('accepted', 200, processingAttributes(event, false));
    const attributes = processingAttributes(event, true);
    traces.processing(request.stored, processingName(event), attributes, () => {
      traces.stage('lifecycle', () => undefined);
    });
  };
  const cpu = process.cpuUsage();
  const start = performance.now();
  let made = 0;
  await new Promise<void>((done) => {
    const burst = () => {
      for (let k = 0; k < BURST && made < deliveries; k++) delivery(made++);
      if (made >= deliveries) return done();
      setTimeout(burst, Math.max(0, start + (made / rate) * 1000 - performance.now()));
    };
    burst();
  });
  await tracing.shutdown();
  const used = process.cpuUsage(cpu);
  sink.send('report');
  const took = await new Promise<{ exports: number; bytes: number }>((resolve) =>
    sink.once('message', (m) => resolve(m as { exports: number; bytes: number })),
  );
  sink.kill();
  console.log(
    `tracing-sdk: ${deliveries} deliveries at ${rate}/s: CPU ${((used.user + used.system) / deliveries).toFixed(1)} µs ` +
      `per delivery (system ${(used.system / deliveries).toFixed(1)}), ${dropped} spans dropped, ` +
      `${took.exports} exports, ${(took.bytes / 1e6).toFixed(1)} MB, ${((performance.now() - start) / 1000).toFixed(1)} s`,
  );
}

function sink(): void {
  const took = { exports: 0, bytes: 0 };
  const server = createServer((req, res) => {
    req.on('data', (chunk: Buffer) => (took.bytes += chunk.length));
    req.on('end', () => {
      took.exports += 1;
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  server.listen(0, '127.0.0.1', () =>
    process.send?.(`http://127.0.0.1:${(server.address() as AddressInfo).port}`),
  );
  process.on('message', () => process.send?.(took));
}

if (process.argv[2] === '--sink') sink();
else void main(Number(process.argv[2] ?? 100_000), Number(process.argv[3] ?? 10_000));
