import { endAllSessions, recordAudit } from '../cluster/pg-console-sessions';
import { describePgTarget, pgTarget, withPgConnection } from '../cluster/pg-reads';
import { sqlOf } from '../cluster/sql';
import type { Config } from '../config';
import type { NewAuditEntry } from '../domain/console';
import { auditRepo } from '../store/audit';
import { consoleSessionsRepo } from '../store/console-sessions';
import { openStore } from '../store/store';
import { openReadOnly, type Output } from './log-commands';

/**
 * `end-sessions`: signs everyone out of the console (contract §9), as the admins' "End all
 * sessions" button does — every session in the log, on the SQLite file or, with DATABASE_URL, on
 * PostgreSQL for every replica at once. Recorded in `console_audit` (action `end_sessions`, target
 * `command`). A browser that comes back is sent to the sign-in page.
 */

/** The audit row of a command run (no role, session or address: it did not come through the console). */
function auditEntry(at: string, ended: number): NewAuditEntry {
  return {
    at,
    role: null,
    session: null,
    action: 'end_sessions',
    target: 'command',
    detail: { ended },
    ip: null,
  };
}

function show(ended: number, where: string, opts: { json?: boolean }, io: Output): void {
  if (opts.json) return io.out(JSON.stringify({ ended }));
  io.out(`${where}: ended ${ended} console session${ended === 1 ? '' : 's'}; everyone must sign in again`);
}

/** Synchronous on SQLite; a promise in cluster mode. */
export function endSessionsCommand(
  config: Config,
  opts: { json?: boolean },
  io: Output,
): void | Promise<void> {
  const at = new Date().toISOString();
  if (config.cluster) {
    const url = config.cluster.databaseUrl;
    return withPgConnection(
      url,
      async (client) => {
        const sql = sqlOf(client);
        await client.query('BEGIN');
        const ended = await endAllSessions(sql);
        await recordAudit(sql, auditEntry(at, ended));
        await client.query('COMMIT');
        return ended;
      },
      'consig-receiver end-sessions',
    ).then((ended) => show(ended, describePgTarget(pgTarget(url)), opts, io));
  }
  // A missing database is said clearly (as the read commands do), then a writable store.
  openReadOnly(config).close();
  const store = openStore(config.databasePath, {
    busyTimeoutMs: Math.max(config.sqlite.busyTimeoutMs, 5000),
  });
  try {
    const ended = store.db.transaction(() => {
      const n = consoleSessionsRepo(store.db).endAll();
      auditRepo(store.db).record(auditEntry(at, n));
      return n;
    })();
    show(ended, config.databasePath, opts, io);
  } finally {
    store.close();
  }
}
