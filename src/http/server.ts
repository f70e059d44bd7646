import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { type AppDeps, createApp, webhookHandlerFor } from './app';
import { fastPathRoute } from './webhook-routes';

/**
 * The HTTP server production runs (not listening yet): the webhook fast path before Express
 * (createRequestListener), with deliberate timeouts. Tests that mean "the path production uses"
 * build this same server.
 */
export function createHttpServer(deps: AppDeps): Server {
  // Node checks headersTimeout and requestTimeout only every connectionsCheckingInterval (30 s by
  // default), which made them 10–40 s and 30–60 s; check every second so they mean what they say.
  const server = createServer({ connectionsCheckingInterval: 1_000 }, createRequestListener(deps));
  // The service waits 5 s for an answer (interface §6.1); a client that takes far longer to send
  // its headers or body is not the service, and must not hold a socket forever.
  server.headersTimeout = 10_000;
  server.requestTimeout = 30_000;
  server.keepAliveTimeout = 5_000;
  // Header bytes are bounded by Node's 16 KB anyway; past this count Node 20 drops the extra headers
  // and Node 22+ answers 431, so keep it well above anything a real sender uses.
  server.maxHeadersCount = 256;
  return server;
}

/**
 * The request listener production runs: `POST /webhooks` and `POST /webhooks/registry` go straight
 * to the framework-free webhook handler, everything else to Express. Express 5 costs about 0.3 ms
 * of CPU per request on these machines (docs/benchmark.md), as much as verifying, storing and
 * logging a delivery; the hot path does not pay it. Express mounts the same handler, so a request
 * that reaches it instead gets the same answer.
 */
function createRequestListener(deps: AppDeps): (req: IncomingMessage, res: ServerResponse) => void {
  const webhook = deps.webhook ?? webhookHandlerFor(deps);
  const app = createApp({ ...deps, webhook });
  return (req, res) => {
    const route = fastPathRoute(req);
    if (route === undefined) app(req, res);
    else webhook(req, res, route);
  };
}
