import type { AppDeps } from '../app-deps';
import { consoleDeps } from './deps';
import type { ConsoleEventFilter } from '../../domain/console';
import { eventFilter, proposalFilter, type Query } from './filters';
import type { PageContext } from './layout';
import { eventsPage, EVENT_FILTER_FIELDS, rawFilters } from './pages/events';
import { overviewPage } from './pages/overview';
import { proposalPage } from './pages/proposal';
import { proposalsPage } from './pages/proposals';

/**
 * The console's pages as plain functions (query string in, HTML out), with no HTTP around them:
 * what `npm run bench` times as each page's server render. The routes call the same functions.
 */
export function consoleRenderers(deps: AppDeps, role: PageContext['role'] = 'admin') {
  const d = consoleDeps(deps);
  const ctx = (): PageContext => ({ role, csrf: 'bench', now: d.clock.now() });
  return {
    overview: (): Promise<string> => overviewPage(d, ctx()),
    proposals: (query: Query = {}): Promise<string> => proposalsPage(d, ctx(), proposalFilter(query)),
    /** undefined when no proposal has this number. */
    proposal: (nu: number | string): Promise<string | undefined> => proposalPage(d, ctx(), nu),
    /** `query` as the URL gives it, e.g. `{ evento: 'proposta.aprovada', json: '{"dados":{…}}' }`. */
    events: (query: Query = {}): Promise<string> => {
      const filter: ConsoleEventFilter = eventFilter(query);
      return eventsPage(d, ctx(), filter, rawFilters(query, EVENT_FILTER_FIELDS));
    },
  };
}
