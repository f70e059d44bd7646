import type { Statement } from 'better-sqlite3';
import { EVENTOS } from '../src/domain/catalogue';
import { openStore } from '../src/sqlite/store';

/**
 * Fills a database as a year of production would: `events` (all processed), their `deliveries`
 * rows, `proposals` and `proposal_transitions`, in one transaction per 50 000 events. Used by the
 * growth figure of `npm run bench` (ingest with 1 000 000 events already stored), and with people
 * in it by the erasure figures (bench/erasure.ts): everyone a CPF of their own, and one person whose
 * events are spread evenly through the log.
 */

export interface PrefillPeople {
  /** A CPF of its own for each proposal (default: every proposal the same person's, 52998224725). */
  many?: boolean;
  /** One person among the `events`: their CPF, events and proposals (numbered from {@link SUBJECT_NU}). */
  subject?: { cpf: string; events: number; proposals: number };
}

/** The subject's first proposal number; the others' are numbered from 10 000 000. */
export const SUBJECT_NU = 90_000_000;

/** A valid CPF (check digits computed) whose first nine digits are `n`'s last nine. */
export function cpfOf(n: number): string {
  const base = String(n % 1_000_000_000).padStart(9, '0');
  const digit = (s: string) => {
    const sum = [...s].reduce((acc, d, i) => acc + Number(d) * (s.length + 1 - i), 0);
    const r = (sum * 10) % 11;
    return String(r === 10 ? 0 : r);
  };
  const d1 = digit(base);
  return `${base}${d1}${digit(base + d1)}`;
}

interface Writer {
  event: Statement;
  delivery: Statement;
  proposal: Statement;
  transition: Statement;
}

function writer(db: ReturnType<typeof openStore>['db']): Writer {
  return {
    event: db.prepare(
      `INSERT INTO events (dedup_key, webhook_id, kind, evento, nu_proposta, tentativa, received_at, body, body_bytes,
         status, attempts, processed_at)
       VALUES (?, ?, 'event', ?, ?, 1, ?, ?, ?, 'done', 1, ?)`,
    ),
    delivery: db.prepare(
      `INSERT INTO deliveries (received_at, path, outcome, http_status, dedup_key, event_id, duration_ms, body_bytes, secret_index)
       VALUES (?, '/webhooks', 'accepted', 200, ?, ?, 1.2, ?, 0)`,
    ),
    proposal: db.prepare(
      `INSERT INTO proposals (nu_proposta, nu_cpf, vl_emprestimo, no_conveniada, stage, status, last_evento, created_at, updated_at)
       VALUES (?, ?, 15000.5, 'Empresa', 'Efetivação', 'efetivada', 'efetivacao.concluida', ?, ?)`,
    ),
    transition: db.prepare(
      `INSERT INTO proposal_transitions (nu_proposta, event_id, evento, from_status, to_status, applied, reason, at)
       VALUES (?, ?, ?, NULL, 'efetivada', 1, 'forward', ?)`,
    ),
  };
}

const FLOW = EVENTOS.slice(0, 5);

/** Event `i` of the log: a delivery of `evento` for proposal `nu` of the person `cpf`, processed. */
function writeEvent(w: Writer, i: number, at: string, nu: number, cpf: string, evento: string): void {
  const key = `wh_prefill_${i}`;
  const body = JSON.stringify({
    evento,
    timestamp: at,
    dados: {
      nu_proposta: nu,
      nu_cpf: cpf,
      st_proposta: 'x',
      vl_emprestimo: 15000.5,
      no_conveniada: 'Empresa',
    },
    metadata: { tentativa: 1, webhook_id: key },
  });
  const { lastInsertRowid } = w.event.run(key, key, evento, nu, at, body, body.length, at);
  w.delivery.run(at, key, lastInsertRowid, body.length);
  w.transition.run(nu, lastInsertRowid, evento, at);
}

export function prefillDatabase(
  path: string,
  events: number,
  people: PrefillPeople = {},
): { seconds: number } {
  const started = performance.now();
  const store = openStore(path, { migrate: true, synchronous: 'NORMAL' });
  const db = store.db;
  const w = writer(db);
  const subject = people.subject;
  // One event every 30 s, the last one now: a million events are a year, and the last week of them
  // falls in the console's charts (the console figure).
  const start = Date.now() - events * 30_000;
  const chunk = 50_000;
  let others = 0;
  let theirs = 0;
  for (let from = 0; from < events; from += chunk) {
    db.transaction(() => {
      for (let i = from; i < Math.min(events, from + chunk); i++) {
        const at = new Date(start + i * 30_000).toISOString();
        // The subject's events evenly among the others': the k-th where (i + 1) · their share passes k.
        if (subject !== undefined && Math.floor(((i + 1) * subject.events) / events) > theirs) {
          const nu = SUBJECT_NU + (theirs % subject.proposals);
          if (theirs < subject.proposals) w.proposal.run(nu, subject.cpf, at, at);
          writeEvent(w, i, at, nu, subject.cpf, FLOW[theirs % FLOW.length] as string);
          theirs += 1;
          continue;
        }
        const nu = 10_000_000 + Math.floor(others / FLOW.length);
        const cpf = people.many === true ? cpfOf(nu) : '52998224725';
        if (others % FLOW.length === 0) w.proposal.run(nu, cpf, at, at);
        writeEvent(w, i, at, nu, cpf, FLOW[others % FLOW.length] as string);
        others += 1;
      }
    })();
  }
  db.pragma('wal_checkpoint(TRUNCATE)');
  store.close();
  return { seconds: (performance.now() - started) / 1000 };
}
