import { createHmac } from 'node:crypto';
import { Agent, request } from 'node:http';
import { percentile } from '../rigs/harness';
import type { LoadMessage, LoadResult, LoadSpec } from './protocol';

/**
 * The load generator, run by run.ts in its own process (so it has a core of its own): `concurrency`
 * request loops over one keep-alive agent with as many sockets, each sending pre-signed bodies with
 * a unique `metadata.webhook_id`. A warm-up phase, a drain, then the measured window.
 */

interface Item {
  body: Buffer;
  headers: Record<string, string>;
}

interface Outcome {
  status: number;
  startNs: bigint;
  endNs: bigint;
  detail: string | null;
}

/** Loose upper bound of what one Node client core can send in a second: the warm-up pool. */
const WARMUP_POOL_RATE = 20_000;

function main(): void {
  process.once('message', (spec: LoadSpec) => {
    run(spec).then(
      (result) => reply({ type: 'result', result }),
      (err: unknown) => reply({ type: 'error', message: err instanceof Error ? err.message : String(err) }),
    );
  });
}

function reply(message: LoadMessage): void {
  process.send?.(message, undefined, undefined, () => process.disconnect());
}

async function run(spec: LoadSpec): Promise<LoadResult> {
  let seq = 0;
  const makeItem = (): Item => {
    seq += 1;
    const body = Buffer.from(
      JSON.stringify({
        evento: 'proposta.aprovada',
        timestamp: '2026-11-21T10:00:00-03:00',
        dados: {
          nu_proposta: 100_000 + seq,
          nu_cpf: '12345678909',
          st_proposta: 'aprovada',
          vl_emprestimo: 15000.5,
          no_conveniada: 'Empresa Exemplo Ltda',
        },
        metadata: { tentativa: 1, webhook_id: `wh_${spec.idPrefix}_${String(seq).padStart(7, '0')}` },
      }),
    );
    // Signed here, independently of the code under test.
    const signature = `sha256=${createHmac('sha256', spec.secret).update(body).digest('hex')}`;
    return {
      body,
      headers: {
        'content-type': 'application/json',
        'content-length': String(body.length),
        'x-service-signature': signature,
      },
    };
  };

  const pool: Item[] = [];
  let poolIndex = 0;
  const fill = (count: number) => {
    for (let i = 0; i < count; i++) pool.push(makeItem());
  };
  let inlineSigned = 0;
  const next = (): Item => {
    const item = pool[poolIndex];
    if (item !== undefined) {
      poolIndex += 1;
      return item;
    }
    inlineSigned += 1;
    return makeItem();
  };

  const agent = new Agent({ keepAlive: true, maxSockets: spec.concurrency });
  const send = (item: Item): Promise<Outcome> =>
    new Promise((resolve) => {
      const startNs = process.hrtime.bigint();
      const req = request(
        { host: spec.host, port: spec.port, path: spec.path, method: 'POST', agent, headers: item.headers },
        (res) => {
          const status = res.statusCode ?? 0;
          const chunks: Buffer[] | null = status === 200 ? null : [];
          res.on('data', (chunk: Buffer) => chunks?.push(chunk));
          res.on('end', () => {
            const endNs = process.hrtime.bigint();
            const detail = chunks
              ? `${status} ${Buffer.concat(chunks).toString('utf8').slice(0, 200)}`
              : null;
            resolve({ status, startNs, endNs, detail });
          });
          res.on('error', (err) =>
            resolve({ status: 0, startNs, endNs: process.hrtime.bigint(), detail: err.message }),
          );
        },
      );
      req.on('error', (err) =>
        resolve({ status: 0, startNs, endNs: process.hrtime.bigint(), detail: err.message }),
      );
      req.end(item.body);
    });

  let ok200Total = 0;
  let socketErrors = 0;
  const non200: Record<string, number> = {};
  const errorSamples: string[] = [];
  const tally = (o: Outcome) => {
    if (o.status === 200) ok200Total += 1;
    else if (o.status === 0) socketErrors += 1;
    else non200[o.status] = (non200[o.status] ?? 0) + 1;
    if (o.detail !== null && errorSamples.length < 5) errorSamples.push(o.detail);
  };

  /** Runs the loops for `ms`; `onDone` sees each outcome and whether it ended before the deadline. */
  const phase = async (ms: number, onDone: (o: Outcome, inWindow: boolean) => void) => {
    const startNs = process.hrtime.bigint();
    const deadlineNs = startNs + BigInt(Math.round(ms * 1e6));
    let stopped = false;
    const timer = setTimeout(() => {
      stopped = true;
    }, ms);
    const loop = async () => {
      while (!stopped) {
        const o = await send(next());
        tally(o);
        onDone(o, o.endNs <= deadlineNs);
        // A refused connection answers at once: do not spin on it.
        if (o.status === 0) await new Promise((r) => setTimeout(r, 10));
      }
    };
    await Promise.all(Array.from({ length: spec.concurrency }, loop));
    clearTimeout(timer);
    return startNs;
  };

  // Warm-up: JIT, sockets, SQLite page cache. Its count sizes the pool for the measured window.
  fill(Math.ceil((WARMUP_POOL_RATE * Math.max(spec.warmupMs, 200)) / 1000));
  let warmupDone = 0;
  if (spec.warmupMs > 0)
    await phase(spec.warmupMs, (_o, inWindow) => {
      if (inWindow) warmupDone += 1;
    });
  const warmupRate = spec.warmupMs > 0 ? (warmupDone / spec.warmupMs) * 1000 : WARMUP_POOL_RATE;
  // Generous: a short warm-up under-reads the rate (JIT), and signing inline would be measured.
  const wanted = Math.ceil(Math.max(warmupRate * 2, WARMUP_POOL_RATE) * (spec.durationMs / 1000)) + 1000;
  pool.splice(0, poolIndex);
  poolIndex = 0;
  fill(Math.max(0, wanted - pool.length));
  inlineSigned = 0;

  const samples: number[] = [];
  const answers: [number, number, number][] = [];
  if (spec.announceWindow === true) process.send?.({ type: 'window' } satisfies LoadMessage);
  const windowNs = process.hrtime.bigint();
  await phase(spec.durationMs, (o, inWindow) => {
    if (!inWindow) return;
    const ms = Number(o.endNs - o.startNs) / 1e6;
    if (o.status === 200) samples.push(ms);
    if (spec.keepAnswers === true) answers.push([Number(o.endNs - windowNs) / 1e6, ms, o.status]);
  });
  agent.destroy();

  const sorted = Float64Array.from(samples).sort();
  return {
    concurrency: spec.concurrency,
    windowMs: spec.durationMs,
    measured: sorted.length,
    rps: sorted.length / (spec.durationMs / 1000),
    p50Ms: percentile(sorted, 0.5),
    p99Ms: percentile(sorted, 0.99),
    maxMs: sorted.length > 0 ? (sorted[sorted.length - 1] as number) : Number.NaN,
    ok200Total,
    non200,
    socketErrors,
    errorSamples,
    signedInline: inlineSigned,
    ...(spec.keepAnswers === true ? { answers } : {}),
  };
}

main();
