import { delivery } from '../helpers/payloads';
import { eventually, startTestReceiver, type TestReceiver } from '../helpers/receiver';
import { eventsByStatus } from '../helpers/events';

let r: TestReceiver | undefined;
afterEach(async () => {
  await r?.stop();
  r = undefined;
});

const start = (env: Record<string, string> = {}) =>
  startTestReceiver({ env: { ADMIN_TOKEN: 'admin-token-0123456789', ...env }, serviceClient: null });

describe('averbação tracking from webhooks (no poller)', () => {
  it('an event whose dados carries a requestId starts tracking it', async () => {
    r = await start();
    await r.send(delivery('averbacao.solicitada', { nu_proposta: 81, dados: { requestId: 'req-81' } }));
    const rec = r;
    await eventually(() => rec.store.averbacoes.get('req-81') !== undefined, 'tracked');
    expect(r.store.averbacoes.get('req-81')).toMatchObject({
      nu_proposta: 81,
      status: 'queued',
      tracked_via: 'event',
      stale: 0,
    });
    expect(r.store.averbacoes.get('req-81')?.next_poll_at).not.toBeNull();
  });

  it('registry results move it forward; the final one stops polling and is never overwritten', async () => {
    r = await start();
    const rec = r;
    await r.send({ requestId: 'req-1', status: 'processing', correlationId: 'corr-1' }, '/webhooks/registry');
    await eventually(() => rec.store.averbacoes.get('req-1')?.status === 'processing', 'processing');
    expect(r.store.averbacoes.get('req-1')).toMatchObject({
      tracked_via: 'registry',
      correlation_id: 'corr-1',
    });
    const final = { dados: { requestId: 'req-1', status: 'error', motivo: 'margem insuficiente' } };
    await r.send(final, '/webhooks/registry');
    await eventually(() => rec.store.averbacoes.get('req-1')?.status === 'error', 'error');
    const row = r.store.averbacoes.get('req-1');
    expect(row).toMatchObject({ result_source: 'webhook', next_poll_at: null });
    expect(JSON.parse(row?.result_body as string)).toEqual(final); // the whole body is kept
    // Late and contradicting results change nothing.
    await r.send({ requestId: 'req-1', status: 'queued' }, '/webhooks/registry');
    await r.send({ requestId: 'req-1', status: 'completed' }, '/webhooks');
    await eventually(() => eventsByStatus(rec.store.db).pending === undefined, 'processed');
    expect(r.store.averbacoes.get('req-1')).toMatchObject({ status: 'error', result_source: 'webhook' });
  });

  it('correlationId is lost (regression): the first non-empty one from any source is kept', async () => {
    r = await start();
    const rec = r;
    await r.send(delivery('averbacao.solicitada', { nu_proposta: 82, dados: { requestId: 'req-82' } }));
    await eventually(() => rec.store.averbacoes.get('req-82') !== undefined, 'tracked');
    expect(r.store.averbacoes.get('req-82')?.correlation_id).toBeNull();
    // A result without one changes nothing; the first that carries one (under dados) fills it ...
    await r.send({ requestId: 'req-82', status: 'queued', correlationId: ' ' }, '/webhooks/registry');
    await r.send(
      { dados: { requestId: 'req-82', status: 'processing', correlationId: 'corr-82' } },
      '/webhooks/registry',
    );
    await eventually(() => rec.store.averbacoes.get('req-82')?.correlation_id === 'corr-82', 'filled');
    // ... and a later, different one never overwrites it.
    await r.send({ requestId: 'req-82', status: 'completed', correlationId: 'other' }, '/webhooks/registry');
    await eventually(() => rec.store.averbacoes.get('req-82')?.status === 'completed', 'completed');
    expect(r.store.averbacoes.get('req-82')).toMatchObject({ correlation_id: 'corr-82', nu_proposta: 82 });
  });

  it('a result with an unknown status is kept and logged, not applied', async () => {
    r = await start();
    const rec = r;
    await r.send({ requestId: 'req-2', status: 'processing' }, '/webhooks/registry');
    await r.send({ requestId: 'req-2', status: 'em_processamento' }, '/webhooks/registry');
    await eventually(
      () => rec.logs.lines.some((l) => l.msg === 'registry result with an unknown status: kept, not applied'),
      'warned',
    );
    expect(r.store.averbacoes.get('req-2')?.status).toBe('processing');
  });

  it('POST /admin/averbacoes/track declares one; GET lists it', async () => {
    r = await start();
    const post = (body: unknown) =>
      fetch(`${r?.url}/admin/averbacoes/track`, {
        method: 'POST',
        headers: { authorization: 'Bearer admin-token-0123456789', 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const created = await post({ requestId: 'req-9', nu_proposta: 9 });
    expect(created.status).toBe(201);
    expect((await post({ requestId: 'req-9' })).status).toBe(200);
    expect((await post({ nu_proposta: 9 })).status).toBe(400);
    const list = (await (
      await fetch(`${r.url}/admin/averbacoes?status=queued`, {
        headers: { authorization: 'Bearer admin-token-0123456789' },
      })
    ).json()) as { averbacoes: unknown[] };
    expect(list.averbacoes).toEqual([
      expect.objectContaining({ request_id: 'req-9', nu_proposta: 9, tracked_via: 'declared' }),
    ]);
    const metrics = await (await fetch(`${r.url}/metrics`)).text();
    expect(metrics).toContain('consig_averbacoes{status="queued"} 1');
    expect(metrics).toContain('consig_averbacoes_waiting_poll 1');
  });
});
