import { isObject, own } from '../domain/json';
import type { SimulatorCore } from './core';
import { errorReply, type Reply, reply } from './http-util';
import type { ChaosOptions, RegistryOptions } from './options';
import { type Context, type Route, route } from './simulator-router';
import { EVENTOS, isEvento } from './service-flow';

/**
 * The sandbox's own control API under `/_sim`: no auth, never subject to chaos. It lets a test, the
 * demo or a partner make the service do what it would do on its own schedule, or misbehave.
 */

const CONTROL_HELP = [
  'GET  /_sim/state',
  'POST /_sim/proposals/:nu/events   {"evento": "<catalogue event>"}',
  'POST /_sim/proposals/:nu/advance  {"to": "<catalogue event>"}  (omit "to" for one step)',
  'POST /_sim/chaos                  {"duplicateRate", "outOfOrder", "apiErrorRate", "rateLimitRate"}',
  'POST /_sim/registry               {"webhook": "send|delay|drop", "webhookDelayMs", "payloadShape"}',
  'POST /_sim/registrations/:id/reactivate',
];

/** The control API in one line per route, for `GET /_sim` and the `simulate` command. */
export function controlApiHelp(): string[] {
  return [...CONTROL_HELP];
}

/** `:nu` of a known proposal, or the 404 to answer. */
function knownProposal(core: SimulatorCore, ctx: Context): { nu: number } | { reply: Reply } {
  const raw = ctx.params.nu ?? '';
  const nu = /^\d+$/.test(raw) ? Number(raw) : null;
  if (nu === null || core.proposals.get(nu) === undefined)
    return { reply: errorReply(404, 'NOT_FOUND', `unknown proposal ${raw}`) };
  return { nu };
}

function sendEvent(core: SimulatorCore) {
  return (ctx: Context): Reply => {
    const found = knownProposal(core, ctx);
    if ('reply' in found) return found.reply;
    const evento = own(ctx.body, 'evento');
    if (!isEvento(evento))
      return errorReply(400, 'VALIDATION_ERROR', `evento must be one of ${EVENTOS.join(', ')}`, {
        field: 'evento',
      });
    void core.sendEvent(found.nu, evento);
    return reply(202, { nu_proposta: found.nu, eventos: [evento] });
  };
}

function advance(core: SimulatorCore) {
  return (ctx: Context): Reply => {
    const found = knownProposal(core, ctx);
    if ('reply' in found) return found.reply;
    if (ctx.body !== undefined && !isObject(ctx.body))
      return errorReply(400, 'VALIDATION_ERROR', 'expected a JSON object {to?}');
    const to = own(ctx.body, 'to');
    if (to !== undefined && !isEvento(to))
      return errorReply(400, 'VALIDATION_ERROR', `to must be one of ${EVENTOS.join(', ')}`, { field: 'to' });
    const result = core.advance(found.nu, to);
    if (!result.ok) return errorReply(409, 'CONFLICT', result.message);
    return reply(202, { nu_proposta: found.nu, eventos: result.eventos });
  };
}

/** A settings change: 200 with the settings now in force, or 400 naming the invalid one. */
function settingsUpdate<T>(apply: (input: Record<string, unknown>) => T) {
  return (ctx: Context): Reply => {
    if (!isObject(ctx.body)) return errorReply(400, 'VALIDATION_ERROR', 'expected a JSON object');
    try {
      return reply(200, apply(ctx.body));
    } catch (err) {
      return errorReply(400, 'VALIDATION_ERROR', err instanceof Error ? err.message : String(err));
    }
  };
}

function reactivate(core: SimulatorCore) {
  return (ctx: Context): Reply => {
    const id = ctx.params.id ?? '';
    if (!core.reactivate(id)) return errorReply(404, 'NOT_FOUND', `unknown registration ${id}`);
    return reply(200, { id, active: true, consecutiveFailures: 0 });
  };
}

export function controlRoutes(core: SimulatorCore): Route[] {
  const { settings } = core;
  return [
    route('GET', '/_sim', 'control', () => reply(200, { routes: controlApiHelp() })),
    route('GET', '/_sim/state', 'control', () => reply(200, core.state())),
    route('POST', '/_sim/proposals/:nu/events', 'control', sendEvent(core)),
    route('POST', '/_sim/proposals/:nu/advance', 'control', advance(core)),
    // The resolvers check every value, so the body needs no more than being an object.
    route(
      'POST',
      '/_sim/chaos',
      'control',
      settingsUpdate((b) => settings.setChaos(b as ChaosOptions)),
    ),
    route(
      'POST',
      '/_sim/registry',
      'control',
      settingsUpdate((b) => settings.setRegistry(b as RegistryOptions)),
    ),
    route('POST', '/_sim/registrations/:id/reactivate', 'control', reactivate(core)),
  ];
}
