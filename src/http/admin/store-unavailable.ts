import type { ErrorRequestHandler } from 'express';
import { StorageError } from '../../domain/errors';
import { HttpError } from '../errors';

/** What a route says when PostgreSQL does not answer this replica (the client asks again). */
export const STORE_UNAVAILABLE =
  'the log (PostgreSQL) does not answer this replica now; ask again shortly (a feed cursor you hold stays valid)';

/**
 * Cluster mode: a read or write the log could not do because PostgreSQL is away (a StorageError,
 * src/postgres/pg-port.ts) is answered 503 `log_unavailable` with a Retry-After, never a 500.
 */
export const storeUnavailableAs503: ErrorRequestHandler = (err: unknown, _req, _res, next) => {
  next(err instanceof StorageError ? new HttpError(503, 'log_unavailable', STORE_UNAVAILABLE) : err);
};
