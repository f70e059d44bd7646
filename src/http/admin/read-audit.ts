import type { Request } from 'express';
import { consoleAudit } from '../../core/console-session-queries';
import { clientAddress } from '../../domain/cidr';
import type { AuditAction } from '../../domain/console';
import { isLockBusy, StorageError } from '../../domain/errors';
import { maskCpfsInText } from '../../domain/privacy';
import type { AppDeps } from '../app-deps';
import { HttpError } from '../errors';
import { STORE_UNAVAILABLE } from './store-unavailable';

/**
 * Reads of personal data are audited (LGPD, issue 45; contract §4, §8, §9): each `/admin/*` GET that
 * answers a body or a proposal's CPF, and the change feed, records one `console_audit` row per
 * answer, through the store port (the SQLite file, or PostgreSQL in cluster mode): action
 * `admin_read` (`feed_read` for the feed), the route's resource as target, what was asked as
 * detail (its CPFs masked), the client's address (TRUST_PROXY as the webhook routes read it), role
 * `admin` and person {@link ADMIN_TOKEN_PERSON}. A route records after its read and before it
 * answers, only when it serves something (a 404 shows no one's data).
 *
 * The row is written before the answer, and an answer whose row could not be written is not sent:
 * 503 (busy: `storage_busy`; PostgreSQL away: `log_unavailable`; anything else: `audit_unavailable`),
 * with a Retry-After, as the other admin failures. Serving the data anyway would make the audit
 * miss exactly the reads made while it was failing, which are the ones it exists to show; a reader
 * refused asks again, and the data has not moved.
 */

/** `console_audit.person` of an admin read: the bearer token stands for no named person. */
export const ADMIN_TOKEN_PERSON = 'admin-token';

/** Why a read was refused when its audit row could not be written. */
export const AUDIT_UNAVAILABLE =
  'the read could not be recorded in the audit (console_audit), so nothing was served; ask again shortly';

/** Query parameters kept in a row's detail at most, and characters of each value. */
const MAX_PARAMS = 12;
const MAX_VALUE_CHARS = 200;

/** What a route read: the resource (`event:42`, `feed`) and, beside the query, what it served. */
export interface ReadTarget {
  target: string;
  /** Added to the query's parameters in the detail (e.g. `rows`, `messages`). */
  served?: Record<string, unknown>;
}

/** Records one read; rejects with what the request should answer when the row was not written. */
export type ReadAudit = (req: Request, read: ReadTarget) => Promise<void>;

/** The admin routes' audit of their reads (`admin_read`; `feed_read` for the feed). */
export function adminReadAudit(
  deps: Pick<AppDeps, 'storePort' | 'clock' | 'config' | 'logger'>,
  action: Extract<AuditAction, 'admin_read' | 'feed_read'> = 'admin_read',
): ReadAudit {
  const audit = consoleAudit(deps.storePort.sql);
  const trustProxy = deps.config.trustProxy ?? 0;
  return async (req, { target, served }) => {
    try {
      await audit.record({
        at: deps.clock.now().toISOString(),
        role: 'admin',
        session: null,
        person: ADMIN_TOKEN_PERSON,
        action,
        target: auditTarget(target),
        detail: readDetail(req, served),
        ip: adminAddress(req, trustProxy),
      });
    } catch (err) {
      deps.logger.error(
        { err: errorText(err), action, target: auditTarget(target) },
        'read not audited: refused',
      );
      throw unauditedAnswer(err);
    }
  };
}

/** The client's address as the admin API's audit rows keep it (TRUST_PROXY as the webhook routes read it). */
export function adminAddress(req: Pick<Request, 'socket' | 'headers'>, trustProxy: number): string {
  return clientAddress(req.socket.remoteAddress, req.headers['x-forwarded-for'], trustProxy);
}

/**
 * What a read whose audit row failed answers: the store's own busy or away answers as every other
 * admin failure (a lock held elsewhere, PostgreSQL away), otherwise 503 `audit_unavailable`.
 */
export function unauditedAnswer(err: unknown): unknown {
  if (isLockBusy(err)) return err;
  if (err instanceof StorageError) return new HttpError(503, 'log_unavailable', STORE_UNAVAILABLE);
  return new HttpError(503, 'audit_unavailable', AUDIT_UNAVAILABLE);
}

/** A target as the audit keeps it: a path's text is the requester's, so a CPF in it is masked. */
export function auditTarget(target: string): string {
  return maskCpfsInText(target.slice(0, MAX_VALUE_CHARS));
}

/**
 * What was asked: the query's parameters as given (text only, bounded), with `served`; null when
 * neither has any. Its CPFs are masked when the row is written (domain/console.ts auditDetailText).
 */
export function readDetail(
  req: Pick<Request, 'query'>,
  served: Record<string, unknown> = {},
): Record<string, unknown> | null {
  const asked = Object.entries(req.query as Record<string, unknown>)
    .filter((entry): entry is [string, string] => typeof entry[1] === 'string')
    .slice(0, MAX_PARAMS)
    .map(([name, value]) => [name.slice(0, MAX_VALUE_CHARS), value.slice(0, MAX_VALUE_CHARS)]);
  const detail = { ...Object.fromEntries(asked), ...served } as Record<string, unknown>;
  return Object.keys(detail).length === 0 ? null : detail;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
