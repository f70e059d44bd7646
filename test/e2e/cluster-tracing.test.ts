import { FakeDestination } from '../helpers/destination';
import { pgBed } from '../helpers/cluster-bed';
import { waitFor } from '../helpers/cluster-db';
import { deliveryTrace, describeTrace, OtlpCollector, SPAN_KIND } from '../helpers/otlp-collector';
import { delivery, postRaw, SECRET, signed } from '../helpers/payloads';
import { type ServerProcess, startServe } from '../helpers/process';
import { tempDir } from '../helpers/tmp';

/**
 * Tracing in cluster mode (issue 35): the delivery is answered by a replica that only ingests
 * (CLUSTER_CONCURRENCY=0) and processed and forwarded by another one, two real `serve` processes on
 * one real PostgreSQL exporting to one OTLP/HTTP endpoint on loopback. The trace context crosses
 * the spool, the relay and PostgreSQL with the event, and the forwarded message: one trace from the
 * service's `traceparent` to the lender's, each span on the resource of the replica that made it.
 */

const bed = pgBed({ prefix: 'tracing' });
const FORWARD_SECRET = `whsec_${Buffer.from('cluster-tracing-lender-secret-012').toString('base64')}`;
const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const PARENT_ID = '00f067aa0ba902b7';

let tmp: ReturnType<typeof tempDir>;
let collector: OtlpCollector;
let destination: FakeDestination;
const fleet: ServerProcess[] = [];

beforeEach(async () => {
  tmp = tempDir('consig-cluster-tracing-');
  collector = await new OtlpCollector().start();
  destination = await FakeDestination.start();
});
afterEach(async () => {
  for (const s of fleet.splice(0)) s.child.kill('SIGKILL');
  await collector.stop();
  await destination.close();
  tmp.cleanup();
});

async function replica(name: string, env: Record<string, string>): Promise<ServerProcess> {
  const s = await startServe({
    DATABASE_URL: bed.url,
    DATABASE_PATH: `${tmp.dir}/${name}.db`,
    REPLICA_ID: name,
    RELAY_INTERVAL_MS: '20',
    WEBHOOK_SECRETS: SECRET,
    LOG_LEVEL: 'info',
    OTEL_TRACES_EXPORTER: 'otlp',
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
    OTEL_BSP_SCHEDULE_DELAY: '100',
    ...env,
  });
  fleet.push(s);
  await waitFor(
    async () => /^consig_cluster_connected 1$/m.test(await (await fetch(`${s.url}/metrics`)).text()),
    `${name} connected`,
  );
  return s;
}

it('an ingest-only replica answers, another processes and forwards: one trace from the service’s traceparent to the lender’s', async () => {
  const ingest = await replica('r-ingest', { CLUSTER_CONCURRENCY: '0' });
  await replica('r-work', {
    CLUSTER_CONCURRENCY: '2',
    FORWARD_URL: destination.url,
    FORWARD_SECRET,
  });
  const { raw, signature } = signed(delivery('proposta.aprovada', { nu_proposta: 920001 }));
  const answer = await postRaw(`${ingest.url}/webhooks`, raw, {
    'content-type': 'application/json',
    'x-service-signature': signature,
    traceparent: `00-${TRACE_ID}-${PARENT_ID}-01`,
  });
  expect(answer.status).toBe(200);
  await waitFor(() => destination.requests.length >= 2, 'both messages forwarded');
  await waitFor(
    () => collector.trace(TRACE_ID).filter((s) => s.kind === SPAN_KIND.client).length >= 2,
    'the attempts’ spans exported',
  );

  const traceparents = destination.requests.map((r) => String(r.headers.traceparent));
  const trace = deliveryTrace(collector, TRACE_ID, PARENT_ID, traceparents);
  process.stdout.write(`${describeTrace(collector.trace(TRACE_ID))}\n`);
  // Each span on the resource of the replica that made it.
  expect(trace.server.resource).toMatchObject({
    'service.instance.id': 'r-ingest',
    'service.name': 'consig-receiver',
  });
  expect(trace.processing.resource).toMatchObject({ 'service.instance.id': 'r-work' });
  for (const s of [...trace.stages, ...trace.attempts])
    expect(s.resource['service.instance.id']).toBe('r-work');
  // What the delivery was, said once, by the request's span; the processing's: the event and the attempt.
  expect(trace.server.attributes).toMatchObject({
    'consig.event_id': answer.body.event_id,
    'consig.nu_proposta': '920001',
  });
  expect(trace.processing.attributes).toStrictEqual({
    'consig.event_id': answer.body.event_id,
    'consig.attempt': 1,
  });
  const text = JSON.stringify(collector.spans.map((s) => [s.name, s.attributes, s.resource]));
  for (const secret of ['12345678909', SECRET, FORWARD_SECRET, signature]) expect(text).not.toContain(secret);
}, 90_000);
