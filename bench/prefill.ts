import { EVENTOS } from '../src/domain/catalogue';
import { openStore } from '../src/store/store';

/**
 * Fills a database as a year of production would: `events` (all processed), their `deliveries`
 * rows, `proposals` and `proposal_transitions`, in one transaction per 50 000 events. Used by the
 * growth figure of `npm run bench` (ingest with 1 000 000 events already stored).
 */
export function prefillDatabase(path: string, events: number): { seconds: number } {
  const started = performance.now();
  const store = openStore(path, { migrate: true, synchronous: 'NORMAL' });
  const db = store.db;
  const insEvent = db.prepare(
    `INSERT INTO events (dedup_key, webhook_id, kind, evento, nu_proposta, tentativa, received_at, body, body_bytes,
       status, attempts, processed_at)
     VALUES (?, ?, 'event', ?, ?, 1, ?, ?, ?, 'done', 1, ?)`,
  );
  const insDelivery = db.prepare(
    `INSERT INTO deliveries (received_at, path, outcome, http_status, dedup_key, event_id, duration_ms, body_bytes, secret_index)
     VALUES (?, '/webhooks', 'accepted', 200, ?, ?, 1.2, ?, 0)`,
  );
  const insProposal = db.prepare(
    `INSERT INTO proposals (nu_proposta, nu_cpf, vl_emprestimo, no_conveniada, stage, status, last_evento, created_at, updated_at)
     VALUES (?, '52998224725', 15000.5, 'Empresa', 'Efetivação', 'efetivada', 'efetivacao.concluida', ?, ?)`,
  );
  const insTransition = db.prepare(
    `INSERT INTO proposal_transitions (nu_proposta, event_id, evento, from_status, to_status, applied, reason, at)
     VALUES (?, ?, ?, NULL, 'efetivada', 1, 'forward', ?)`,
  );
  const flow = EVENTOS.slice(0, 5);
  // One event every 30 s, the last one now: a million events are a year, and the last week of them
  // falls in the console's charts (the console figure).
  const start = Date.now() - events * 30_000;
  const chunk = 50_000;
  for (let from = 0; from < events; from += chunk) {
    db.transaction(() => {
      for (let i = from; i < Math.min(events, from + chunk); i++) {
        const nu = 10_000_000 + Math.floor(i / flow.length);
        const evento = flow[i % flow.length] as string;
        const at = new Date(start + i * 30_000).toISOString();
        const key = `wh_prefill_${i}`;
        const body = JSON.stringify({
          evento,
          timestamp: at,
          dados: {
            nu_proposta: nu,
            nu_cpf: '52998224725',
            st_proposta: 'x',
            vl_emprestimo: 15000.5,
            no_conveniada: 'Empresa',
          },
          metadata: { tentativa: 1, webhook_id: key },
        });
        const { lastInsertRowid } = insEvent.run(key, key, evento, nu, at, body, body.length, at);
        insDelivery.run(at, key, lastInsertRowid, body.length);
        if (i % flow.length === 0) insProposal.run(nu, at, at);
        insTransition.run(nu, lastInsertRowid, evento, at);
      }
    })();
  }
  db.pragma('wal_checkpoint(TRUNCATE)');
  store.close();
  return { seconds: (performance.now() - started) / 1000 };
}
