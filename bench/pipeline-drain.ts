import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { systemClock } from '../src/clock';
import { EVENTOS } from '../src/domain/catalogue';
import { createLogger } from '../src/logger';
import { Pipeline } from '../src/runtime/single/pipeline';
import { openDatabase } from '../src/sqlite/database';
import { openStore } from '../src/sqlite/store';

/**
 * Pipeline figure (issue #3): events/s drained from a backlog of stored `pending` events, through
 * the event step as `serve` runs it (core/event-step.ts: the life cycle, registry tracking and
 * results), on the real SQLite file with the defaults of `serve` (one turn at a time, pipeline
 * connection synchronous=NORMAL). Target: ≥ 2 000 events/s. (Before issue 33 the figure ran the
 * life-cycle handler alone; a `--baseline` of such a commit runs its own file, so the ratio then
 * compares the event step with all its stages against the life cycle alone.)
 *
 * With `forward` (`node dist/bench/pipeline-drain.js 20000 forward`), the outbox stage runs too,
 * with the change feed on (no destination): each event's effects are read back and its messages
 * stored, in the event's transaction, as `serve` does with FORWARD_FEED on.
 */
/** `serve`'s registry schedule. */
const SCHEDULE = { graceMs: 60_000, intervalMs: 30_000, maxIntervalMs: 600_000, maxAgeMs: 86_400_000 };

export interface DrainResult {
  events: number;
  fillSeconds: number;
  drainSeconds: number;
  eventsPerSecond: number;
  done: number;
  transitions: number;
}

const FLOW = EVENTOS.filter(
  (e) => !e.endsWith('negada') && e !== 'proposta.cancelada' && e !== 'pagamento.falha',
);

export async function runPipelineDrain(events = 100_000, forward = false): Promise<DrainResult> {
  if (events < 1) throw new Error('runPipelineDrain needs at least one event');
  const dir = mkdtempSync(join(tmpdir(), 'consig-bench-pipeline-'));
  try {
    const path = join(dir, 'consig.db');
    const store = openStore(path, { migrate: true });
    const fillStart = performance.now();
    const insert = store.db.prepare(
      `INSERT INTO events (dedup_key, webhook_id, kind, evento, nu_proposta, tentativa, received_at, body, body_bytes, status)
       VALUES (?, ?, 'event', ?, ?, 1, ?, ?, ?, 'pending')`,
    );
    store.db.transaction(() => {
      for (let i = 0; i < events; i++) {
        const nu = 1_000_000 + Math.floor(i / FLOW.length);
        const evento = FLOW[i % FLOW.length] as string;
        const body = JSON.stringify({
          evento,
          timestamp: '2026-11-21T10:00:00-03:00',
          dados: {
            nu_proposta: nu,
            nu_cpf: '12345678909',
            st_proposta: 'x',
            vl_emprestimo: 15000.5,
            no_conveniada: 'Empresa',
          },
          metadata: { tentativa: 1, webhook_id: `wh_${i}` },
        });
        insert.run(`wh_${i}`, `wh_${i}`, evento, nu, new Date().toISOString(), body, body.length);
      }
    })();
    const fillSeconds = (performance.now() - fillStart) / 1000;

    const db = openDatabase(path, { synchronous: 'NORMAL' });
    const pipeline = new Pipeline(db, {
      stages: { schedule: SCHEDULE, outbox: forward ? { destinations: [], feedEnabled: true } : null },
      maxAttempts: 8,
      clock: systemClock,
      logger: createLogger('warn'),
    });
    const start = performance.now();
    pipeline.start();
    while (pipeline.depth > 0) await pipeline.onIdle();
    const drainSeconds = (performance.now() - start) / 1000;
    await pipeline.stop(1000);
    const done = (
      store.db.prepare("SELECT count(*) AS n FROM events WHERE status = 'done'").get() as { n: number }
    ).n;
    const transitions = (
      store.db.prepare('SELECT count(*) AS n FROM proposal_transitions').get() as { n: number }
    ).n;
    db.close();
    store.close();
    return { events, fillSeconds, drainSeconds, eventsPerSecond: events / drainSeconds, done, transitions };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (require.main === module) {
  const n = Number(process.argv[2] ?? 100_000);
  const forward = process.argv[3] === 'forward';
  runPipelineDrain(n, forward).then((r) => {
    console.log(
      `pipeline drain${forward ? ' (outbox on)' : ''}: ${r.events} events in ${r.drainSeconds.toFixed(2)} s = ${Math.round(r.eventsPerSecond)} events/s ` +
        `(target ≥ 2000) — done ${r.done}, transitions ${r.transitions}; backlog written in ${r.fillSeconds.toFixed(2)} s`,
    );
    if (r.done !== r.events || r.transitions !== r.events) process.exitCode = 1;
  });
}
