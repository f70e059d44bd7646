import { FakeDestination } from '../../helpers/destination';
import { delivery } from '../../helpers/payloads';
import { eventually, startTestReceiver, type TestReceiver } from '../../helpers/receiver';

/**
 * A real receiver (store, pipeline, HTTP, forwarding to a real loopback destination) seeded the way
 * the service would: signed deliveries over HTTP telling proposal 123's whole story — created,
 * pre-approved, approved, averbação requested, one delivery repeated, one step arriving late, the
 * registry's result — a few more proposals for the lists, and dead letters made by a handler that
 * throws for chosen proposals while they are marked failing (HANDLER_MAX_ATTEMPTS=1: dead at once).
 */

export const ADMIN = 'admin-token-browser-0123456789';
export const VIEWER = 'viewer-token-browser-0123456789';
export const STORY_NU = 123;
export const REQUEST_ID = 'req-browser-123';
/** Proposals whose events go dead: DEAD_NU, DEAD_NU + 1, … */
export const DEAD_NU = 880_000;
/** Proposals with only a `proposta.criada`, for the lists and the events filter. */
export const OTHER_NUS = [456, 789];

export interface ConsoleStory {
  r: TestReceiver;
  lender: FakeDestination;
  /** Proposal 123's events in the order sent (the late one last; the repeat is one event). */
  storyEventIds: number[];
  /** One dead event per dead proposal, in order. */
  deadEventIds: number[];
  /** While a proposal is in here, its events' handler throws. */
  failing: Set<number>;
  statusOf(eventId: number): string | undefined;
  stop(): Promise<void>;
}

const STORY: readonly [string, Record<string, unknown>][] = [
  ['proposta.criada', {}],
  ['proposta.pre_aprovada', {}],
  ['proposta.aprovada', {}],
  ['averbacao.solicitada', { requestId: REQUEST_ID }],
];

/** Starts the receiver and seeds it; resolves once every event has settled (done or dead). */
export async function startConsoleStory(options: { deadLetters?: number } = {}): Promise<ConsoleStory> {
  const failing = new Set<number>();
  const lender = await FakeDestination.start();
  const r = await startTestReceiver({
    env: {
      ADMIN_TOKEN: ADMIN,
      VIEWER_TOKEN: VIEWER,
      HANDLER_MAX_ATTEMPTS: '1',
      FORWARD_URL: `http://127.0.0.1:${lender.port}/hook`,
      FORWARD_SECRET: 'forward-secret-browser',
    },
    configureHandlers: (router) =>
      router.onAny((event) => {
        if (event.nuProposta !== null && failing.has(Number(event.nuProposta)))
          throw new Error(`handler down for proposal ${event.nuProposta} (on purpose)`);
      }),
  });
  const statusOf = (id: number) =>
    (r.store.db.prepare('SELECT status FROM events WHERE id = ?').get(id) as { status: string } | undefined)
      ?.status;
  const accepted = async (body: unknown, path?: string): Promise<number> => {
    const res = await r.send(body, path);
    if (res.status !== 200) throw new Error(`seeding: ${path ?? '/webhooks'} answered ${res.status}`);
    return res.body.event_id as number;
  };

  const storyEventIds: number[] = [];
  for (const [evento, dados] of STORY) {
    storyEventIds.push(await accepted(delivery(evento, { nu_proposta: STORY_NU, dados })));
  }
  // The service repeats a delivery it already made (same webhook_id): a duplicate.
  const repeated = delivery('proposta.aprovada', { nu_proposta: STORY_NU, webhook_id: 'wh-browser-123-dup' });
  storyEventIds.push(await accepted(repeated));
  await accepted(repeated);
  // An earlier step arriving after later ones: recorded, not applied.
  storyEventIds.push(await accepted(delivery('proposta.pre_aprovada', { nu_proposta: STORY_NU })));
  await accepted({ requestId: REQUEST_ID, status: 'completed' }, '/webhooks/registry');
  for (const nu of OTHER_NUS) await accepted(delivery('proposta.criada', { nu_proposta: nu }));

  const deadEventIds: number[] = [];
  for (let i = 0; i < (options.deadLetters ?? 0); i++) {
    failing.add(DEAD_NU + i);
    deadEventIds.push(await accepted(delivery('proposta.criada', { nu_proposta: DEAD_NU + i })));
  }

  const unsettled = r.store.db.prepare(
    "SELECT count(*) AS n FROM events WHERE status NOT IN ('done', 'dead', 'ignored', 'invalid')",
  );
  await eventually(() => (unsettled.get() as { n: number }).n === 0, 'every event processed');
  if (!storyEventIds.every((id) => statusOf(id) === 'done'))
    throw new Error("seeding: proposal 123's events not done");
  if (!deadEventIds.every((id) => statusOf(id) === 'dead')) throw new Error('seeding: dead letters not dead');
  await eventually(() => lender.requests.length >= storyEventIds.length, 'forwarded to the lender');

  return {
    r,
    lender,
    storyEventIds,
    deadEventIds,
    failing,
    statusOf,
    async stop() {
      await r.stop();
      await lender.close();
    },
  };
}
