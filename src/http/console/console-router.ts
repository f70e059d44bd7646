import express, {
  type NextFunction,
  type Request,
  type RequestHandler,
  type Response,
  Router,
} from 'express';
import { StorageError } from '../../domain/errors';
import type { Logger } from '../../logger';
import { isLockBusy } from '../../domain/errors';
import type { AppDeps } from '../app-deps';
import { HttpError, notFound } from '../errors';
import { actionRoutes } from './actions';
import { CONSOLE_CSS, FAVICON_SVG } from './assets';
import { contextOf, loginRoutes, logoutRoute, requireCsrf, requireSession } from './console-auth';
import { consoleDeps, consoleEnabled } from './deps';
import { html } from './html';
import { page } from './layout';
import { messagePage } from './pages/login-page';
import { oidcRoutes } from './oidc-routes';
import { pageRoutes } from './page-routes';
import { subjectRoutes } from './subject-routes';
import { LoginThrottle } from './throttle';

/**
 * `/console` (contract §9): server-rendered pages for operators, signed in with ADMIN_TOKEN (all
 * rights) or VIEWER_TOKEN (read only); with neither set, every path answers 404 like `/admin`.
 * Mounted on Express only: the webhook fast path never reaches it.
 */

/**
 * No script at all, styles from the console's own stylesheet only, forms posting only here, never
 * framed, no referrer leaving the page, nothing cached.
 */
function csp(formOrigins: readonly string[]): string {
  return [
    "default-src 'none'",
    "style-src 'self'",
    "img-src 'self'",
    // Sign-out may lead to the identity provider's end-session endpoint (a form's redirect).
    ["form-action 'self'", ...formOrigins].join(' '),
    "frame-ancestors 'none'",
    "base-uri 'none'",
  ].join('; ');
}

const CSP = csp([]);

export const securityHeaders: RequestHandler = headersWith(() => CSP);

function headersWith(policy: () => string): RequestHandler {
  return (_req, res, next) => {
    res.set({
      'content-security-policy': policy(),
      'x-frame-options': 'DENY',
      'referrer-policy': 'no-referrer',
      'x-content-type-options': 'nosniff',
      'cross-origin-opener-policy': 'same-origin',
      'cache-control': 'no-store',
    });
    next();
  };
}

/**
 * The log cannot answer now: the SQLite file is locked by another connection, or (cluster mode)
 * PostgreSQL does not answer this replica (a StorageError of src/postgres/pg-port.ts). A 503
 * page asking to come back, never a 500: the process stays up and nothing was changed (the write
 * that failed was its request's only one, or its transaction rolled back).
 */
function unavailablePage(err: unknown, mayBeAway: boolean): string | undefined {
  if (isLockBusy(err))
    return messagePage(
      'Busy',
      'The database is locked by another connection: try again in a moment. Nothing was changed.',
    );
  // A page that would show personal data whose audit row could not be written (page-routes.ts).
  if (err instanceof HttpError && err.status === 503) return messagePage('Unavailable', err.message);
  if (mayBeAway && err instanceof StorageError)
    return messagePage(
      'Unavailable',
      'PostgreSQL is not reachable from this replica right now: try again in a moment. Nothing was changed.',
    );
  return undefined;
}

/** Errors as pages: a filter that makes no sense is a 400 that says so; anything else says nothing. */
function consoleErrors(logger: Logger, d: ReturnType<typeof consoleDeps>) {
  return (
    err: Error & { status?: number; expose?: boolean },
    _req: Request,
    res: Response,
    _next: NextFunction,
  ): void => {
    if (res.headersSent) return;
    const unavailable = unavailablePage(err, d.mayBeAway);
    if (unavailable !== undefined) {
      res.status(503).set('retry-after', '1').send(unavailable);
      return;
    }
    const status = typeof err.status === 'number' && err.status >= 400 && err.status < 500 ? err.status : 500;
    if (status === 500) logger.error({ err: err.message }, 'console: unhandled error');
    const message =
      status === 500
        ? 'Something went wrong on the server (it is in the log).'
        : err.expose === true
          ? err.message
          : 'The request could not be read.';
    const signed = res.locals.console !== undefined;
    res.status(status).send(
      signed
        ? page({
            title: status === 400 ? 'Bad request' : 'Error',
            current: null,
            ctx: contextOf(d, res),
            body: html`<p class="error-box" role="alert">${message}</p>`,
          })
        : messagePage(status === 400 ? 'Bad request' : 'Error', message),
    );
  };
}

/**
 * `/favicon.ico`, where a browser looks for an icon on a page that declares none (a JSON answer of
 * `/admin` or `/metrics` opened in a tab): the console's icon while the console is on, else 404 as
 * any unknown path.
 */
export function faviconRoute(deps: AppDeps): Router {
  const router = Router();
  if (consoleEnabled(deps))
    router.get('/favicon.ico', (_req, res) => {
      res.type('image/svg+xml').set('Cache-Control', 'max-age=86400').send(FAVICON_SVG);
    });
  return router;
}

export function consoleRouter(deps: AppDeps): Router {
  const router = Router();
  if (!consoleEnabled(deps)) {
    router.use(notFound);
    return router;
  }
  const d = consoleDeps(deps);
  const oidc = d.oidc;
  router.use(oidc === null ? securityHeaders : headersWith(() => csp(oidc.formOrigins())));
  // Discovery starts now, in the background: the receiver does not wait for the provider.
  void oidc?.configuration();
  router.get('/assets/console.css', (_req, res) => {
    res.type('text/css').send(CONSOLE_CSS);
  });
  router.get('/assets/favicon.svg', (_req, res) => {
    res.type('image/svg+xml').send(FAVICON_SVG);
  });
  router.use(express.urlencoded({ extended: false, limit: '16kb', parameterLimit: 50 }));
  const throttle = new LoginThrottle(d.log.signInFailures);
  loginRoutes(router, d, throttle);
  oidcRoutes(router, d, throttle);
  router.use(requireSession(d));
  router.use(requireCsrf(d));
  logoutRoute(router, d);
  actionRoutes(router, d);
  subjectRoutes(router, d);
  pageRoutes(router, d);
  router.use((_req: Request, res: Response) => {
    res.status(404).send(
      page({
        title: 'Not found',
        current: null,
        ctx: contextOf(d, res),
        body: html`<p class="error-box" role="alert">No such console page.</p>`,
      }),
    );
  });
  router.use(consoleErrors(deps.logger, d));
  return router;
}
