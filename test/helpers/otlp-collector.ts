import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A small OTLP/HTTP trace receiver on loopback, standing in for an OpenTelemetry Collector: it
 * accepts `POST /v1/traces` as the SDK's exporters send it, `application/json` (http/json) or
 * `application/x-protobuf` (http/protobuf), and decodes both into {@link CollectedSpan}s. The
 * protobuf is read by a wire-format reader of its own (below): the OTLP exporter ships a writer,
 * not a reader, so a test that decodes what the SDK wrote checks the SDK, not itself.
 */

export type AttributeValue = string | number | boolean;

export interface CollectedSpan {
  traceId: string;
  spanId: string;
  /** null for a root span. */
  parentSpanId: string | null;
  name: string;
  /** OTLP's SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  startNs: bigint;
  endNs: bigint;
  attributes: Record<string, AttributeValue>;
  /** OTLP's status code: 0 unset, 1 ok, 2 error. */
  statusCode: number;
  /** The resource the span came with (service.name, service.version, …). */
  resource: Record<string, AttributeValue>;
}

export const SPAN_KIND = { internal: 1, server: 2, client: 3, producer: 4, consumer: 5 } as const;

export class OtlpCollector {
  readonly spans: CollectedSpan[] = [];
  /** Content types of the export requests received, in order. */
  readonly contentTypes: string[] = [];
  /**
   * What the collector answers: `refuse` answers 503 to every export (a collector in trouble);
   * `hold` reads each export and never answers it (a collector that hangs, or an endpoint that
   * swallows what is sent to it): the exporter waits until its own timeout.
   */
  mode: 'accept' | 'refuse' | 'hold' = 'accept';
  /** Exports received and never answered (`hold`), counted as they arrive. */
  held = 0;
  private server: Server | null = null;
  url = '';

  async start(port = 0): Promise<this> {
    const server = createServer((req, res) => {
      void readAll(req).then((body) => {
        if (req.method !== 'POST' || req.url !== '/v1/traces') {
          res.writeHead(404).end();
          return;
        }
        const type = String(req.headers['content-type'] ?? '');
        this.contentTypes.push(type);
        if (this.mode === 'hold') {
          this.held += 1;
          return; // never answered: the client's timeout, or stop(), ends it
        }
        if (this.mode === 'refuse') {
          res.writeHead(503).end();
          return;
        }
        this.spans.push(...(type.includes('json') ? fromJson(body) : fromProtobuf(body)));
        res.writeHead(200, { 'content-type': type }).end(type.includes('json') ? '{}' : '');
      });
    });
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    this.server = server;
    this.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    const server = this.server;
    this.server = null;
    if (server === null) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** The spans of one trace. */
  trace(traceId: string): CollectedSpan[] {
    return this.spans.filter((s) => s.traceId === traceId);
  }
}

function readAll(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

// ---- http/json (OTLP's JSON encoding: ids as hex, 64-bit integers as strings).

interface JsonKeyValue {
  key: string;
  value: {
    stringValue?: string;
    intValue?: string | number;
    boolValue?: boolean;
    doubleValue?: number;
  };
}

/* eslint-disable @typescript-eslint/no-explicit-any -- OTLP's JSON, read field by field */
function fromJson(body: Buffer): CollectedSpan[] {
  const request = JSON.parse(body.toString('utf8')) as any;
  return (request.resourceSpans ?? []).flatMap((rs: any) => {
    const resource = jsonAttributes(rs.resource?.attributes);
    return (rs.scopeSpans ?? []).flatMap((ss: any) =>
      (ss.spans ?? []).map((s: any): CollectedSpan => ({
        traceId: s.traceId,
        spanId: s.spanId,
        parentSpanId: s.parentSpanId ? s.parentSpanId : null,
        name: s.name,
        kind: Number(s.kind),
        startNs: BigInt(s.startTimeUnixNano),
        endNs: BigInt(s.endTimeUnixNano),
        attributes: jsonAttributes(s.attributes),
        statusCode: Number(s.status?.code ?? 0),
        resource,
      })),
    );
  });
}
/* eslint-enable @typescript-eslint/no-explicit-any */

function jsonAttributes(list: JsonKeyValue[] | undefined): Record<string, AttributeValue> {
  const out: Record<string, AttributeValue> = {};
  for (const { key, value } of list ?? []) {
    if (value.stringValue !== undefined) out[key] = value.stringValue;
    else if (value.intValue !== undefined) out[key] = Number(value.intValue);
    else if (value.boolValue !== undefined) out[key] = value.boolValue;
    else if (value.doubleValue !== undefined) out[key] = value.doubleValue;
  }
  return out;
}

// ---- http/protobuf: opentelemetry/proto/collector/trace/v1 ExportTraceServiceRequest.

/** A message's fields: number → values (varints and fixed64 as bigint, length-delimited as bytes). */
type Fields = Map<number, (bigint | Buffer)[]>;

function readVarint(buf: Buffer, at: { pos: number }): bigint {
  let result = 0n;
  let shift = 0n;
  for (;;) {
    const byte = buf[at.pos++] as number;
    result |= BigInt(byte & 0x7f) << shift;
    if ((byte & 0x80) === 0) return result;
    shift += 7n;
  }
}

function fields(buf: Buffer): Fields {
  const out: Fields = new Map();
  const at = { pos: 0 };
  while (at.pos < buf.length) {
    const tag = Number(readVarint(buf, at));
    const field = tag >>> 3;
    let value: bigint | Buffer;
    switch (tag & 7) {
      case 0:
        value = readVarint(buf, at);
        break;
      case 1:
        value = buf.readBigUInt64LE(at.pos);
        at.pos += 8;
        break;
      case 2: {
        const length = Number(readVarint(buf, at));
        value = buf.subarray(at.pos, at.pos + length);
        at.pos += length;
        break;
      }
      case 5:
        value = BigInt(buf.readUInt32LE(at.pos));
        at.pos += 4;
        break;
      default:
        throw new Error(`unexpected protobuf wire type ${tag & 7}`);
    }
    out.set(field, [...(out.get(field) ?? []), value]);
  }
  return out;
}

const bytesOf = (f: Fields, n: number): Buffer[] => (f.get(n) ?? []) as Buffer[];
const oneBytes = (f: Fields, n: number): Buffer | undefined => bytesOf(f, n)[0];
const oneInt = (f: Fields, n: number): bigint => ((f.get(n) ?? [])[0] as bigint | undefined) ?? 0n;
const text = (f: Fields, n: number): string => oneBytes(f, n)?.toString('utf8') ?? '';

function pbAttributes(list: Buffer[]): Record<string, AttributeValue> {
  const out: Record<string, AttributeValue> = {};
  for (const kv of list) {
    const f = fields(kv);
    const value = fields(oneBytes(f, 2) ?? Buffer.alloc(0));
    if (value.has(1)) out[text(f, 1)] = text(value, 1);
    else if (value.has(2)) out[text(f, 1)] = oneInt(value, 2) === 1n;
    else if (value.has(3)) out[text(f, 1)] = Number(BigInt.asIntN(64, oneInt(value, 3)));
    else if (value.has(4))
      out[text(f, 1)] = Buffer.from(new BigUint64Array([oneInt(value, 4)]).buffer).readDoubleLE(0);
  }
  return out;
}

function fromProtobuf(body: Buffer): CollectedSpan[] {
  return bytesOf(fields(body), 1).flatMap((rsBytes) => {
    const rs = fields(rsBytes);
    const resource = pbAttributes(bytesOf(fields(oneBytes(rs, 1) ?? Buffer.alloc(0)), 1));
    return bytesOf(rs, 2).flatMap((ssBytes) =>
      bytesOf(fields(ssBytes), 2).map((spanBytes): CollectedSpan => {
        const s = fields(spanBytes);
        const parent = oneBytes(s, 4);
        return {
          traceId: oneBytes(s, 1)?.toString('hex') ?? '',
          spanId: oneBytes(s, 2)?.toString('hex') ?? '',
          parentSpanId: parent === undefined || parent.length === 0 ? null : parent.toString('hex'),
          name: text(s, 5),
          kind: Number(oneInt(s, 6)),
          startNs: oneInt(s, 7),
          endNs: oneInt(s, 8),
          attributes: pbAttributes(bytesOf(s, 9)),
          statusCode: Number(oneInt(fields(oneBytes(s, 15) ?? Buffer.alloc(0)), 3)),
          resource,
        };
      }),
    );
  });
}

/** One delivery's trace, from the service's `traceparent` to the destination's requests. */
export interface DeliveryTrace {
  server: CollectedSpan;
  processing: CollectedSpan;
  stages: CollectedSpan[];
  attempts: CollectedSpan[];
}

/**
 * The spans of the delivery whose request carried `traceparent` (trace `traceId`, parent span
 * `parentSpanId`), checked link by link: the SERVER span continues it, processing is its child,
 * each stage processing's, each forwarding attempt a CLIENT span under the forwarding stage, and the
 * destination received, for each attempt, the `traceparent` naming it. Throws (jest's expect) at the
 * first broken link.
 */
export function deliveryTrace(
  collector: OtlpCollector,
  traceId: string,
  parentSpanId: string,
  destinationTraceparents: readonly string[],
): DeliveryTrace {
  const spans = collector.trace(traceId);
  const server = spans.find((s) => s.kind === SPAN_KIND.server);
  expect(server).toMatchObject({ parentSpanId, name: 'POST /webhooks' });
  const processing = spans.find((s) => s.kind === SPAN_KIND.consumer);
  expect(processing?.parentSpanId).toBe(server?.spanId);
  const stages = spans.filter((s) => s.parentSpanId === processing?.spanId);
  const names = stages.map((s) => s.attributes['consig.stage']);
  expect(names).toEqual(expect.arrayContaining(['lifecycle', 'forwarding']));
  // The delivery carries no requestId: its registry stage has nothing to do, and no span.
  expect(names).not.toContain('registry_tracking');
  const forwarding = stages.find((s) => s.attributes['consig.stage'] === 'forwarding');
  const attempts = spans.filter((s) => s.kind === SPAN_KIND.client);
  expect(attempts.length).toBeGreaterThan(0);
  for (const a of attempts) expect(a.parentSpanId).toBe(forwarding?.spanId);
  // What the destination received names exactly those attempts.
  expect([...destinationTraceparents].sort()).toEqual(
    attempts.map((a) => `00-${traceId}-${a.spanId}-01`).sort(),
  );
  // In time too: the answer's span starts first, processing after it, the attempts after processing began.
  expect((processing as CollectedSpan).startNs).toBeGreaterThanOrEqual((server as CollectedSpan).startNs);
  for (const a of attempts) expect(a.startNs).toBeGreaterThanOrEqual((processing as CollectedSpan).startNs);
  return { server: server as CollectedSpan, processing: processing as CollectedSpan, stages, attempts };
}

/** The trace as lines `kind name duration`, for a failure message or a report. */
export function describeTrace(spans: readonly CollectedSpan[]): string {
  const kinds = ['', 'internal', 'server', 'client', 'producer', 'consumer'];
  return [...spans]
    .sort((a, b) => (a.startNs < b.startNs ? -1 : a.startNs > b.startNs ? 1 : 0))
    .map((s) => {
      const ms = Number(s.endNs - s.startNs) / 1e6;
      const where = s.resource['service.instance.id'] ?? '';
      return `${s.spanId} ← ${s.parentSpanId ?? 'root'}  ${kinds[s.kind] ?? s.kind} ${s.name} ${ms.toFixed(3)} ms ${where}`;
    })
    .join('\n');
}
