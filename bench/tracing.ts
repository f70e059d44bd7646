import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * The tracing row (issue 35): the receiver with OTEL_TRACES_EXPORTER=otlp, every trace sampled,
 * exporting http/protobuf to a sink in the bench's own process (it reads each export and answers
 * 200, as a collector would), against the receiver with tracing off, in the same run: the ingest
 * ratio at c=50 (target ≥ 0.85×) and the CPU each delivery's spans cost, in µs.
 */

/** The target's environment, its endpoint set once the sink listens. */
export function tracedEnv(endpoint: string): Record<string, string> {
  return {
    OTEL_TRACES_EXPORTER: 'otlp',
    OTEL_TRACES_SAMPLER: 'always_on',
    OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
  };
}

let sink: { server: Server; url: string; exports: number; bytes: number } | null = null;

/** The sink, started once for the run (it does not hold the process open). */
export async function otlpSink(): Promise<{ url: string; exports: number; bytes: number }> {
  if (sink !== null) return sink;
  const server = createServer((req, res) => {
    let bytes = 0;
    req.on('data', (chunk: Buffer) => (bytes += chunk.length));
    req.on('end', () => {
      if (sink !== null) {
        sink.exports += 1;
        sink.bytes += bytes;
      }
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  server.unref();
  sink = { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, exports: 0, bytes: 0 };
  return sink;
}

/**
 * The spans of one delivery in this row: the request's, its processing's and its lifecycle stage's
 * (the bench's deliveries carry no requestId: no registry stage; no destination: no forwarding).
 */
const SPANS_PER_DELIVERY = 3;

interface Row {
  target: string;
  concurrency: number;
  rps: number;
  cpuUsPerReq: number | null;
  ok200Total: number;
  spansDropped: number | null;
}

/** The report's lines: on over off at c=50, and what tracing adds to each delivery's CPU. */
export function tracingLines(rows: readonly Row[]): string[] {
  const at = (name: string) => rows.find((r) => r.target === name && r.concurrency === 50);
  const on = at('receiver-traced');
  const off = at('receiver');
  if (on === undefined || off === undefined) return [];
  const ratio = on.rps / off.rps;
  const cpu =
    on.cpuUsPerReq === null || off.cpuUsPerReq === null
      ? 'n/a'
      : `${(on.cpuUsPerReq - off.cpuUsPerReq).toFixed(0)} µs (${off.cpuUsPerReq.toFixed(0)} → ${on.cpuUsPerReq.toFixed(0)})`;
  // Spans the bounded queue dropped: the exporter falling behind on a machine the load saturates.
  const dropped =
    on.spansDropped === null
      ? 'n/a'
      : `${on.spansDropped} (${(on.spansDropped / on.ok200Total).toFixed(2)} per delivery of ${SPANS_PER_DELIVERY})`;
  return [
    `target "ingest with tracing on (100 % sampled) ≥ 0.85× off at c=50" (issue 35): ${ratio >= 0.85 ? 'MET' : 'MISSED'} (${ratio.toFixed(2)}×)`,
    `note: tracing's CPU per delivery (receiver-traced − receiver, c=50, every thread): ${cpu}; ` +
      `the sink took ${sink?.exports ?? 0} exports, ${((sink?.bytes ?? 0) / 1e6).toFixed(1)} MB (every round); ` +
      `spans dropped by the queue in the median round: ${dropped}`,
  ];
}
