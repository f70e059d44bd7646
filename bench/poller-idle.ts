import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { systemClock } from '../src/clock';
import { createLogger } from '../src/logger';
import { RegistryPoller } from '../src/runtime/single/poller';
import { openStore } from '../src/sqlite/store';

/**
 * Poller figure (issue #4): thousands of tracked registrations waiting for their next poll must
 * cost nothing. Measures one scheduling pass (the indexed due-list query) and the CPU and memory of
 * the idle poller ticking once a second.
 */
export interface PollerIdleResult {
  tracked: number;
  passMsMean: number;
  passMsP99: number;
  idleCpuPercent: number;
  idleSeconds: number;
  rssMb: number;
  polls: number;
}

export async function runPollerIdle(tracked = 10_000, idleSeconds = 5): Promise<PollerIdleResult> {
  const dir = mkdtempSync(join(tmpdir(), 'consig-bench-poller-'));
  try {
    const store = openStore(join(dir, 'consig.db'), { migrate: true });
    const now = Date.now();
    const insert = store.db.prepare(
      `INSERT INTO averbacoes (request_id, nu_proposta, status, tracked_via, next_poll_at, created_at, updated_at)
       VALUES (?, ?, 'processing', 'started', ?, ?, ?)`,
    );
    store.db.transaction(() => {
      for (let i = 0; i < tracked; i++) {
        // Spread over the next hour: none due during the measurement.
        const next = new Date(now + 600_000 + (i % 3600) * 1000).toISOString();
        insert.run(`req-${i}`, i, next, new Date(now).toISOString(), new Date(now).toISOString());
      }
    })();
    let polls = 0;
    const poller = new RegistryPoller(
      store.db,
      store.events,
      {
        requestStatus: async (requestId) => {
          polls += 1;
          return { requestId, status: 'processing', raw: {} };
        },
      },
      {
        schedule: { graceMs: 120_000, intervalMs: 30_000, maxIntervalMs: 900_000, maxAgeMs: 172_800_000 },
        clock: systemClock,
        logger: createLogger('warn'),
        tickMs: 1000,
      },
    );
    const passes: number[] = [];
    for (let i = 0; i < 500; i++) {
      const t = performance.now();
      poller.tick();
      passes.push(performance.now() - t);
    }
    passes.sort((a, b) => a - b);
    const cpuBefore = process.cpuUsage();
    const wallBefore = performance.now();
    poller.start();
    await new Promise((r) => setTimeout(r, idleSeconds * 1000));
    await poller.stop(1000);
    const cpu = process.cpuUsage(cpuBefore);
    const wall = performance.now() - wallBefore;
    store.close();
    return {
      tracked,
      passMsMean: passes.reduce((a, b) => a + b, 0) / passes.length,
      passMsP99: passes[Math.floor(passes.length * 0.99)] ?? 0,
      idleCpuPercent: ((cpu.user + cpu.system) / 1000 / wall) * 100,
      idleSeconds,
      rssMb: process.memoryUsage().rss / 1024 / 1024,
      polls,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (require.main === module) {
  runPollerIdle().then((r) => console.log(JSON.stringify(r, null, 2)));
}
