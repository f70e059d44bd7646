import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { controlRoutes } from './control-routes';
import { SimulatorCore, type SimulatorState } from './core';
import {
  type ChaosOptions,
  type RegistryOptions,
  type ResolvedChaos,
  resolveOptions,
  type SimulatorOptions,
} from './options';
import { reportRoutes } from './report-routes';
import { requestListener } from './simulator-router';
import { serviceRoutes } from './service-routes';
import type { AdvancePlan, Evento } from './service-flow';
import type { RegistrySettings } from './settings';

/**
 * A stand-in for the consignado service (contract §7), over real HTTP: what tests, the demo and
 * partners' sandboxes talk to instead of the real thing.
 *
 * Service routes (JSON; all but the token endpoint, `POST /offers/search` and `/result/:id` need
 * `Authorization: Bearer <token from POST /oauth/token>`, else 401 `{error: 'UNAUTHORIZED'}`):
 *
 *   POST /oauth/token                    client credentials → {access_token, token_type, expires_in}
 *   POST /api/v1/webhooks                {url, eventos, secret} → 201 {id, url, eventos, active}
 *   POST /api/v1/propostas               interface §2.1 → 201 §2.2, then proposta.criada and the analysis
 *   POST /contract/averbacao             any JSON object → 202 {requestId, status, _links.result}
 *   POST /contract                       the same, deprecated: `Deprecation: true`
 *   GET  /request/:requestId             {requestId, correlationId, status} (+ x-api-key when set)
 *   GET  /result/:requestId              never answers (interface §4.2: the broken `_links.result`)
 *   GET  /workers/new-relationships, /contracts/relationship-ended,
 *        /contracts/accounting-and-remuneration, /emprestimos/consultar-repasse-pagamentos
 *   POST /offers/search                  public; pages of 25 fixed offers (`pageStart`, `pageSize`)
 *
 * Control API (the sandbox's own: no auth, never subject to chaos):
 *
 *   GET  /_sim                                  this list
 *   GET  /_sim/state                            registrations, proposals and their events,
 *                                               averbações, deliveries, every attempt, settings
 *   POST /_sim/proposals/:nu/events  {evento}   send that catalogue event for the proposal, as is
 *   POST /_sim/proposals/:nu/advance {to?}      send the next happy-path events up to `to` (one step
 *                                               when omitted); a detour (proposta.negada,
 *                                               proposta.cancelada, averbacao.negada, pagamento.falha)
 *                                               goes after the happy-path event it follows
 *   POST /_sim/chaos    {duplicateRate?, outOfOrder?, outOfOrderMaxHoldMs?, apiErrorRate?, rateLimitRate?}
 *   POST /_sim/registry {processingAfterMs?, completeAfterMs?, webhook?, webhookDelayMs?, payloadShape?}
 *                                               for averbações created from now on
 *   POST /_sim/registrations/:id/reactivate     a deactivated callback receives again
 *
 * Guesses where the interface shows nothing (documented in docs/simulator.md):
 * - the token endpoint and its answers follow OAuth 2.0 client credentials (RFC 6749 §4.4, §5);
 * - `POST /api/v1/webhooks` answers 201 `{id, url, eventos, active: true}`; errors 400 VALIDATION_ERROR;
 * - `POST /api/v1/propostas` answers 201; validation errors 400 `{error: 'VALIDATION_ERROR', message,
 *   field}`; the business rule 422; an employee is "not found" for `unknownCpfs`;
 *   `vl_emprestimo` above `denyAboveAmount` is denied (`proposta.negada`);
 * - the dados of every event, and their `st_proposta`: see event-examples.ts;
 * - an averbação body naming a known `nu_proposta` sends `averbacao.solicitada` at once and
 *   `averbacao.aprovada` / `averbacao.negada` on completion; `forceError: true` makes it end in error;
 * - the registry webhook goes to each active registration's URL + `/registry`, signed like
 *   deliveries, with `{requestId, correlationId, status, nu_proposta}` at the top level (or under
 *   `dados`), retried like deliveries, its failures counting against that registration;
 * - `GET /request/:id` of an unknown id answers 404 `{error: 'NOT_FOUND'}`;
 * - reports and offers are hypermedia pages where `pageStart` is the offset of the first item.
 */

export interface Simulator {
  /** Base URL, e.g. `http://127.0.0.1:4010` (no trailing slash). */
  readonly url: string;
  readonly port: number;
  /** `<url>/oauth/token`. */
  readonly tokenUrl: string;
  /** Issues a token as the token endpoint would (for tests and the demo). */
  issueToken(): string;
  /** A snapshot (deep copy) of everything the simulator did; `GET /_sim/state` serves the same. */
  state(): SimulatorState;
  /** `POST /_sim/proposals/:nu/events`. Throws for an unknown proposal. */
  sendEvent(nuProposta: number, evento: Evento): Promise<void>;
  /** `POST /_sim/proposals/:nu/advance`: the events it sends, or an error message. */
  advance(nuProposta: number, to?: string): AdvancePlan;
  /** `POST /_sim/chaos`: merges and returns the settings (TypeError for invalid ones). */
  setChaos(chaos: ChaosOptions): ResolvedChaos;
  /** `POST /_sim/registry`, for averbações created from now on. */
  setRegistry(registry: RegistryOptions): RegistrySettings;
  /** `POST /_sim/registrations/:id/reactivate`. */
  reactivate(registrationId: string): boolean;
  /** Stops everything promptly: the server, held sockets, timers and in-flight deliveries. */
  close(): Promise<void>;
}

/** The URL a client uses: a wildcard address is reached through loopback; IPv6 goes in brackets. */
function baseUrl(host: string, port: number): string {
  const shown = host === '0.0.0.0' ? '127.0.0.1' : host === '::' ? '::1' : host;
  return `http://${shown.includes(':') ? `[${shown}]` : shown}:${port}`;
}

function listen(server: Server, port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

/** Closes in an order where nothing new starts: timers first, then sockets, then what was in flight. */
async function shutDown(core: SimulatorCore, server: Server): Promise<void> {
  // Timers first: nothing new starts, pending waits end and in-flight fetches are aborted.
  core.timers.close();
  for (const res of core.held) res.destroy();
  core.held.clear();
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeAllConnections();
  await closed;
  await core.deliverer.settled();
}

/** Starts the simulator and resolves once it listens. Options: see `SimulatorOptions`. */
export async function startSimulator(options: SimulatorOptions = {}): Promise<Simulator> {
  const opts = resolveOptions(options);
  const core = new SimulatorCore(opts);
  const server = createServer(
    requestListener({
      routes: [...serviceRoutes(core), ...reportRoutes(), ...controlRoutes(core)],
      tokens: core.tokens,
      chaos: () => core.settings.chaos,
      random: opts.random,
      logger: opts.logger,
      held: core.held,
    }),
  );
  const port = await listen(server, opts.port, opts.host);
  const url = baseUrl(opts.host, port);
  opts.logger.info({ url }, 'simulator listening');
  let closing: Promise<void> | null = null;
  return {
    url,
    port,
    tokenUrl: `${url}/oauth/token`,
    issueToken: () => core.tokens.issue(),
    state: () => core.state(),
    sendEvent: (nu, evento) => core.sendEvent(nu, evento),
    advance: (nu, to) => core.advance(nu, to),
    setChaos: (chaos) => core.settings.setChaos(chaos),
    setRegistry: (registry) => core.settings.setRegistry(registry),
    reactivate: (id) => core.reactivate(id),
    close() {
      closing ??= shutDown(core, server).then(() => opts.logger.info({ url }, 'simulator closed'));
      return closing;
    },
  };
}
