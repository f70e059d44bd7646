import type { NextFunction, Request, Response } from 'express';
import type { Logger } from '../logger';
import { isLockBusy } from '../domain/errors';

/** The `Retry-After` of an admin answer or a readiness probe refused because the database is locked. */
export const BUSY_RETRY_AFTER_SECONDS = 1;

/** A request the client got wrong, answered `{ error, message }` with `status` (4xx). */
export class HttpError extends Error {
  /** Read by the error handler, like the errors of Express's own body parsers. */
  readonly expose = true;

  constructor(
    readonly status: number,
    /** The answer's `error` code, e.g. `bad_request`. */
    readonly type: string,
    message: string,
  ) {
    super(message);
    this.name = 'HttpError';
  }
}

/** Answers a route that does not exist (and `/admin/*` without ADMIN_TOKEN). */
export function notFound(_req: Request, res: Response): void {
  res.status(404).json({ error: 'not_found' });
}

/**
 * The last handler: a client error (an HttpError, or a body Express could not parse) keeps its
 * 4xx status and says what was wrong; an HttpError of 5xx (a route that knows why it cannot answer
 * now) says why, with a Retry-After; anything else is a 500 that says nothing and is logged.
 */
export function errorHandler(logger: Logger) {
  return (
    err: Error & { status?: number; type?: string; expose?: boolean },
    _req: Request,
    res: Response,
    _next: NextFunction,
  ): void => {
    if (isLockBusy(err)) {
      // Another process holds the write lock: the write waited only a short slice (it blocks the
      // event loop that answers webhooks); the client tries again.
      logger.warn({ err: err.message }, 'database locked by another connection: answered 503');
      if (!res.headersSent)
        res.status(503).set('retry-after', String(BUSY_RETRY_AFTER_SECONDS)).json({
          error: 'storage_busy',
          message: 'the database is locked by another connection; try again',
        });
      return;
    }
    const status = typeof err.status === 'number' && err.status >= 400 && err.status < 600 ? err.status : 500;
    if (err instanceof HttpError && status >= 500) {
      // A route that knows why it cannot answer (the log's database away): it says so, and when to retry.
      logger.warn({ err: err.message, error: err.type, status }, 'route could not answer now');
      if (!res.headersSent)
        res
          .status(status)
          .set('retry-after', String(BUSY_RETRY_AFTER_SECONDS))
          .json({ error: err.type, message: err.message });
      return;
    }
    if (status >= 500) logger.error({ err: err.message }, 'unhandled error in route');
    if (res.headersSent) return;
    if (status >= 500) {
      res.status(status).json({ error: 'internal_error' });
      return;
    }
    res
      .status(status)
      .json({ error: err.type ?? 'bad_request', ...(err.expose === true ? { message: err.message } : {}) });
  };
}
