import { withMaskedResultBody } from '../domain/privacy';
import type { Config } from '../config';
import { UsageError } from '../domain/errors';
import { trackRegistration } from '../registry/tracking';
import { trackOnPostgres } from '../cluster/pg-track';
import { parseNuProposta } from '../store/proposals';
import { openStore } from '../store/store';
import {
  type AverbacoesOptions,
  openReadOnly,
  type Output,
  parseAverbacoesOptions,
  showAverbacoes,
} from './log-commands';

/** `averbacoes [--status S] [--stale] [--proposal N]`: tracked registrations and their polling. */
export function averbacoesCommand(config: Config, opts: AverbacoesOptions, io: Output): void {
  const limit = parseAverbacoesOptions(opts);
  const store = openReadOnly(config);
  try {
    const rows = store.averbacoes.list({
      status: opts.status,
      stale: opts.stale ? true : undefined,
      nuProposta: opts.proposal === undefined ? undefined : parseNuProposta(opts.proposal),
      limit,
    });
    showAverbacoes(rows, opts, io);
  } finally {
    store.close();
  }
}

/** `track <requestId> [--proposal N]`: declare a registration so the receiver follows it. */
export function trackCommand(
  config: Config,
  requestId: string,
  opts: { proposal?: string; json?: boolean },
  io: Output,
): void | Promise<void> {
  const id = requestId.trim();
  if (id === '' || id.length > 200) throw new UsageError('track needs a requestId');
  const nuProposta = opts.proposal === undefined ? null : parseNuProposta(opts.proposal);
  if (config.cluster) {
    // Cluster mode: the row in PostgreSQL, its first poll a pg-boss job queued with it.
    return trackOnPostgres(
      config.cluster.databaseUrl,
      { requestId: id, nuProposta },
      new Date(),
      config.registry.webhookGraceMs,
    ).then(({ created, row }) => showTracked(id, created, row, opts, io));
  }
  openReadOnly(config).close(); // says clearly when the database is missing or not migrated
  const store = openStore(config.databasePath, {
    busyTimeoutMs: Math.max(config.sqlite.busyTimeoutMs, 5000),
  });
  try {
    const created = trackRegistration(
      store.averbacoes,
      { requestId: id, nuProposta, via: 'declared' },
      new Date(),
      config.registry.webhookGraceMs,
    );
    showTracked(id, created, store.averbacoes.get(id), opts, io);
  } finally {
    store.close();
  }
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
