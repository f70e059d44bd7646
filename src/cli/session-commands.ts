import type { Config } from '../config';
import type { NewAuditEntry } from '../domain/console';
import { withCommandStore } from '../open-store';
import type { Output } from './log-commands';

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

export async function endSessionsCommand(
  config: Config,
  opts: { json?: boolean },
  io: Output,
): Promise<void> {
  const at = new Date().toISOString();
  const { ended, name } = await withCommandStore(
    config,
    { access: 'write', command: 'end-sessions' },
    async (log) => ({ ended: await log.endSessions((n) => auditEntry(at, n)), name: log.name }),
  );
  show(ended, name, opts, io);
}
