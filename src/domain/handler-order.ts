import { EVENTOS } from './catalogue';
import { type HandlerEvent, type Router, routeName } from './event-router';

/**
 * The order an event's handlers run in, in both modes, stated once: the life cycle moves the
 * proposal (contract §6), then a `requestId` in the event starts tracking its averbação, then
 * registry results and poll answers update it, then the partner's handlers (which see all that
 * done), and the forwarding outbox last, since it reads back what every other handler recorded
 * (contract §8). SQLite mode registers its handlers with {@link registerInOrder}; cluster mode runs
 * {@link stagesFor}'s list (runtime/cluster/turn.ts); the built-in stages' statements are core/effects.ts's.
 */
export const HANDLER_ORDER = [
  'lifecycle',
  'registry_tracking',
  'registry_results',
  'partner',
  'forwarding',
] as const;

export type HandlerStage = (typeof HANDLER_ORDER)[number];
export type BuiltInStage = Exclude<HandlerStage, 'partner' | 'forwarding'>;

/** The routes (an `evento`, or `registry`) each stage handles; `any`: every event. */
const ROUTES: Readonly<Record<HandlerStage, readonly string[] | 'any'>> = {
  lifecycle: EVENTOS,
  registry_tracking: EVENTOS,
  registry_results: ['registry'],
  partner: 'any',
  forwarding: 'any',
};

/** The stages that handle `event`, in order (the partner's own router then picks its handlers). */
export function stagesFor(event: Pick<HandlerEvent, 'kind' | 'evento'>): HandlerStage[] {
  const name = routeName(event);
  return HANDLER_ORDER.filter((stage) => {
    const routes = ROUTES[stage];
    return routes === 'any' || routes.includes(name);
  });
}

/** What {@link registerInOrder} registers: a handler per stage; the partner's registers its own. */
export type StageHandlers<H> = { readonly [S in Exclude<HandlerStage, 'partner'>]: H } & {
  readonly partner: (router: Router<H>) => void;
};

/** Registers every stage on `router`, in {@link HANDLER_ORDER}. */
export function registerInOrder<H, R extends Router<H>>(router: R, handlers: StageHandlers<H>): R {
  for (const stage of HANDLER_ORDER) {
    if (stage === 'partner') handlers.partner(router);
    else if (ROUTES[stage] === 'any') router.onAny(handlers[stage]);
    else router.on(ROUTES[stage], handlers[stage]);
  }
  return router;
}
