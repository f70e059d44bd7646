import { withMaskedResultBody } from '../domain/privacy';
import type { Config } from '../config';
import { UsageError } from '../domain/errors';
import { parseNuProposta } from '../domain/log-rows';
import { withCommandStore } from '../open-store';
import type { Output } from './log-commands';

/**
 * `track <requestId> [--proposal N]`: declare a registration so the receiver follows it (in
 * cluster mode, its first poll a pg-boss job queued with the row).
 */
export async function trackCommand(
  config: Config,
  requestId: string,
  opts: { proposal?: string; json?: boolean },
  io: Output,
): Promise<void> {
  const id = requestId.trim();
  if (id === '' || id.length > 200) throw new UsageError('track needs a requestId');
  const nuProposta = opts.proposal === undefined ? null : parseNuProposta(opts.proposal);
  const t = { requestId: id, correlationId: null, nuProposta, via: 'declared' as const };
  const { created, averbacao } = await withCommandStore(
    config,
    { access: 'write', command: 'track' },
    (log) => log.track(t, new Date(), config.registry.webhookGraceMs),
  );
  showTracked(id, created, averbacao, opts, io);
}

/** What `track` prints, whichever store it tracked in. */
function showTracked(
  id: string,
  created: boolean,
  row: { next_poll_at: string | null; status: string; result_body: string | null } | undefined,
  opts: { json?: boolean },
  io: Output,
): void {
  if (opts.json)
    return io.out(
      JSON.stringify({
        status: created ? 'tracked' : 'already_tracked',
        averbacao: row && withMaskedResultBody(row),
      }),
    );
  io.out(
    created
      ? `tracking ${id}: first poll at ${row?.next_poll_at} unless the registry webhook comes first`
      : `${id} was already tracked (status ${row?.status})`,
  );
}
