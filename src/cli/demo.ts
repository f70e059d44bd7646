import { randomBytes } from 'node:crypto';
import { createWriteStream, mkdirSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { type ServiceClient, serviceClientFromConfig } from '../client';
import { loadConfig } from '../config';
import { EVENTOS } from '../domain/catalogue';
import { createLogger } from '../logger';
import { type Receiver, startReceiver } from '../main';
import { trackStarted } from '../registry/tracking';
import { type Simulator, startSimulator } from '../simulator';
import type { Output } from './log-commands';
import { renderTable } from './table';

/**
 * `demo`: one command, no configuration. Starts the receiver on its embedded SQLite and the
 * service simulator, registers the callback, creates a handful of proposals and drives them down
 * different paths — with duplicate and out-of-order deliveries on the way — printing progress as
 * the receiver's own database sees it, then a table of final statuses.
 */

interface Path {
  label: string;
  expect: { status: string; averbacao?: { status: string; source: 'webhook' | 'poll' } };
  run: (nu: number) => Promise<void>;
  amount?: number;
}

export async function demoCommand(
  opts: { database?: string; timeoutMs?: number },
  io: Output,
): Promise<void> {
  const dbPath = resolve(opts.database ?? './data/demo.db');
  mkdirSync(dirname(dbPath), { recursive: true });
  for (const suffix of ['', '-wal', '-shm']) rmSync(`${dbPath}${suffix}`, { force: true });
  const logPath = join(dirname(dbPath), 'demo-receiver.log');
  const logFile = createWriteStream(logPath);
  const logger = createLogger('info', logFile);
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const started = Date.now();
  const say = (text: string) =>
    io.out(`[${((Date.now() - started) / 1000).toFixed(1).padStart(5)}s] ${text}`);

  const secret = randomBytes(24).toString('hex');
  const clientSecret = randomBytes(16).toString('hex');
  let sim: Simulator | null = null;
  let receiver: Receiver | null = null;
  let watcher: NodeJS.Timeout | null = null;
  try {
    sim = await startSimulator({
      logger: createLogger('warn', logFile),
      clientId: 'demo-partner',
      clientSecret,
      apiKey: 'demo-api-key',
      analysisDelayMs: 150,
      registry: { processingAfterMs: 300, completeAfterMs: 800 },
      chaos: { duplicateRate: 0.3 },
    });
    const config = loadConfig(
      {
        DATABASE_PATH: dbPath,
        WEBHOOK_SECRETS: secret,
        PORT: '0',
        HOST: '127.0.0.1',
        SERVICE_BASE_URL: sim.url,
        SERVICE_TOKEN_URL: sim.tokenUrl,
        SERVICE_CLIENT_ID: 'demo-partner',
        SERVICE_CLIENT_SECRET: clientSecret,
        SERVICE_API_KEY: 'demo-api-key',
        // Demo-sized schedule: the webhook gets 1.5 s before the poller asks.
        REGISTRY_WEBHOOK_GRACE_MS: '1500',
        REGISTRY_POLL_INTERVAL_MS: '300',
        REGISTRY_POLL_MAX_INTERVAL_MS: '1000',
        SHUTDOWN_TIMEOUT_MS: '3000',
      },
      { requireSecrets: true },
    );
    receiver = await startReceiver(config, { logger, pollTickMs: 200, sweepIntervalMs: 200 });
    const rec = receiver;
    const simulator = sim;
    say(`receiver ${rec.url} (SQLite ${dbPath}), service simulator ${simulator.url}`);
    const client = serviceClientFromConfig(config, logger) as ServiceClient;
    await client.registerWebhook({ url: `${rec.url}/webhooks`, eventos: [...EVENTOS], secret });
    say('callback registered for all 13 events; duplicates on (30 % of deliveries are sent twice)');

    const statusOf = (nu: number) => rec.store.proposals.get(nu)?.status;
    const waitFor = async (what: string, predicate: () => boolean) => {
      const until = Date.now() + timeoutMs;
      while (!predicate()) {
        if (Date.now() > until) throw new Error(`demo: timed out waiting for ${what} (see ${logPath})`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    const advance = async (nu: number, to: string, status: string) => {
      const r = simulator.advance(nu, to);
      if (!r.ok) throw new Error(`demo: simulator could not advance ${nu} to ${to}: ${r.message}`);
      await waitFor(`proposal ${nu} ${status}`, () => statusOf(nu) === status);
    };
    // Averbações start one at a time, so that the simulator's registry mode (send/drop) set for one
    // proposal's request applies to that request only.
    let lock: Promise<unknown> = Promise.resolve();
    const exclusive = <T>(fn: () => Promise<T>): Promise<T> => {
      const run = lock.then(fn, fn);
      lock = run.catch(() => undefined);
      return run;
    };
    const averbacao = async (
      nu: number,
      body: Record<string, unknown> = {},
      webhook: 'send' | 'drop' = 'send',
    ) => {
      const accepted = await exclusive(async () => {
        simulator.setRegistry({ webhook });
        try {
          return await client.startAverbacao({ nu_proposta: nu, ...body });
        } finally {
          simulator.setRegistry({ webhook: 'send' });
        }
      });
      trackStarted(rec.store.averbacoes, accepted, nu, new Date(), config.registry.webhookGraceMs);
      return accepted.requestId;
    };
    const averbacaoDone = (requestId: string) =>
      waitFor(`averbação ${requestId}`, () => {
        const a = rec.store.averbacoes.get(requestId);
        return a !== undefined && (a.status === 'completed' || a.status === 'error');
      });

    const paths: Path[] = [
      {
        label: 'paid',
        expect: { status: 'paga', averbacao: { status: 'completed', source: 'webhook' } },
        run: async (nu) => {
          await advance(nu, 'proposta.aprovada', 'aprovada');
          await averbacaoDone(await averbacao(nu));
          await advance(nu, 'pagamento.realizado', 'paga');
        },
      },
      {
        label: 'denied by credit analysis',
        amount: 250_000,
        expect: { status: 'negada' },
        run: async (nu) => waitFor(`proposal ${nu} negada`, () => statusOf(nu) === 'negada'),
      },
      {
        label: 'averbação denied by the company',
        expect: { status: 'averbacao_negada', averbacao: { status: 'error', source: 'webhook' } },
        run: async (nu) => {
          await advance(nu, 'proposta.aprovada', 'aprovada');
          await averbacaoDone(await averbacao(nu, { forceError: true }));
          await waitFor(`proposal ${nu} averbacao_negada`, () => statusOf(nu) === 'averbacao_negada');
        },
      },
      {
        label: 'registry webhook lost, resolved by polling',
        expect: { status: 'paga', averbacao: { status: 'completed', source: 'poll' } },
        run: async (nu) => {
          await advance(nu, 'proposta.aprovada', 'aprovada');
          const requestId = await averbacao(nu, {}, 'drop');
          await averbacaoDone(requestId);
          say(
            `  ${nu}: registry webhook never came; GET /request/${requestId.slice(0, 8)}… answered completed`,
          );
          await advance(nu, 'pagamento.realizado', 'paga');
        },
      },
      {
        label: 'payment failed, then paid; out-of-order deliveries',
        expect: { status: 'paga', averbacao: { status: 'completed', source: 'webhook' } },
        run: async (nu) => {
          await advance(nu, 'proposta.aprovada', 'aprovada');
          await averbacaoDone(await averbacao(nu));
          simulator.setChaos({ outOfOrder: true });
          const r = simulator.advance(nu, 'pagamento.falha');
          if (!r.ok) throw new Error(`demo: ${r.message}`);
          await waitFor(`proposal ${nu} pagamento_falhou`, () => statusOf(nu) === 'pagamento_falhou');
          simulator.setChaos({ outOfOrder: false });
          await simulator.sendEvent(nu, 'pagamento.realizado');
          await waitFor(`proposal ${nu} paga`, () => statusOf(nu) === 'paga');
        },
      },
    ];

    // Progress: what the receiver's own database says, as it changes.
    const seen = new Map<number, string>();
    const labels = new Map<number, string>();
    watcher = setInterval(() => {
      for (const [nu, label] of labels) {
        const p = rec.store.proposals.get(nu);
        if (!p) continue;
        const now = `${p.stage} / ${p.status}`;
        if (seen.get(nu) !== now) {
          seen.set(nu, now);
          say(`${nu} (${label}): ${now}`);
        }
      }
    }, 50);

    const created: { nu: number; path: Path }[] = [];
    for (const path of paths) {
      const proposal = await client.createProposal({
        nu_cpf: '52998224725',
        nu_cnpj_conveniada: '12.ABC.345/01DE-35',
        vl_emprestimo: path.amount ?? 15_000.5,
        qt_parcela: 48,
        dados_bancarios: { pix: 'cliente@exemplo.com.br' },
      });
      const nu = Number(proposal.nu_proposta);
      labels.set(nu, path.label);
      created.push({ nu, path });
      say(`created proposal ${nu}: ${path.label}`);
    }
    await Promise.all(
      created.map(async ({ nu, path }) => {
        await waitFor(`proposal ${nu} analysed`, () =>
          ['pre_aprovada', 'negada'].includes(statusOf(nu) ?? ''),
        );
        await path.run(nu);
      }),
    );
    await new Promise((r) => setTimeout(r, 300)); // let the last duplicates land
    clearInterval(watcher);
    watcher = null;

    const rows = created.map(({ nu, path }) => {
      const p = rec.store.proposals.get(nu);
      const timeline = rec.store.proposals.timeline(nu);
      const av = rec.store.averbacoes.list({ nuProposta: nu })[0];
      const ok =
        p?.status === path.expect.status &&
        (path.expect.averbacao === undefined ||
          (av?.status === path.expect.averbacao.status && av.result_source === path.expect.averbacao.source));
      return {
        nu_proposta: nu,
        path: path.label,
        stage: p?.stage,
        status: p?.status,
        events: timeline.length,
        duplicates: timeline.reduce((n, t) => n + t.duplicates, 0),
        late: timeline.filter((t) => t.applied === 0).length,
        averbacao: av ? `${av.status} via ${av.result_source ?? '-'}` : '-',
        ok: ok ? 'yes' : 'NO',
      };
    });
    io.out('');
    io.out(
      renderTable(
        ['nu_proposta', 'path', 'stage', 'status', 'events', 'duplicates', 'late', 'averbacao', 'ok'],
        rows,
      ),
    );
    io.out('');
    io.out(`SQLite log: ${dbPath}   (receiver log: ${logPath})`);
    io.out(`  consig-receiver proposal ${created[0]?.nu} --database ${dbPath}`);
    io.out(`  consig-receiver stats --database ${dbPath}`);
    io.out(`  sqlite3 ${dbPath} "SELECT nu_proposta, stage, status FROM proposals"`);
    if (rows.some((r) => r.ok !== 'yes'))
      throw new Error('demo: a proposal did not end where expected (see the table)');
  } finally {
    if (watcher) clearInterval(watcher);
    await receiver?.close();
    await sim?.close();
    logger.flush();
    logFile.end();
  }
}
