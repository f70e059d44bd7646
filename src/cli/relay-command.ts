import type { Config } from '../config';
import { ConsigError } from '../domain/errors';
import { hasGap, type SpoolGap } from '../domain/relay-gap';
import { commandStores } from '../open-store';
import type { SpoolsVerified } from '../verify-spools';
import type { Output } from './log-commands';

/**
 * `relay verify [spool...]` (issue 32): whether PostgreSQL holds every delivery each spool counts
 * as relayed. After a failover to a standby that lagged, the relays send a gap again by themselves
 * (docs/cluster-mode.md "PostgreSQL failover"); this says whether anything is still missing. Exits
 * 1 while a spool has a gap.
 */
export async function relayVerifyCommand(
  config: Config,
  paths: readonly string[],
  opts: { json?: boolean },
  io: Output,
): Promise<void> {
  const result = await commandStores(config).verifySpools(paths);
  if (opts.json) io.out(JSON.stringify(result));
  else for (const line of reportLines(result)) io.out(line);
  const gaps = result.verdicts.filter(hasGap).length;
  if (gaps > 0) throw new RelayGapFound(`${gaps} spool(s) hold relayed deliveries PostgreSQL does not have`);
}

class RelayGapFound extends ConsigError {
  constructor(message: string) {
    super('RELAY_GAP', message);
  }
}

const runs = (gaps: readonly SpoolGap[]) =>
  gaps.map((g) => (g.from === g.through ? `${g.from}` : `${g.from}-${g.through}`)).join(', ');

function reportLines({ database, verdicts, known }: SpoolsVerified): string[] {
  const lines = [`PostgreSQL ${database}:`];
  for (const v of verdicts) {
    const recorded = v.recorded === null ? 'no record of it' : `relayed_through ${v.recorded}`;
    const head = `spool ${v.spool} (${v.path}): relayed through ${v.relayedThrough}, PostgreSQL ${recorded}`;
    const missing = v.missing.reduce((n, g) => n + g.through - g.from + 1, 0);
    lines.push(
      hasGap(v)
        ? `${head}; GAP: ${missing} relayed deliveries missing (spool ids ${runs(v.missing) || 'none held'})`
        : `${head}; ok`,
    );
    if (v.backlog > 0) lines.push(`  ${v.backlog} deliveries not relayed yet (on their way, not a gap)`);
  }
  const checked = new Set(verdicts.map((v) => v.spool));
  for (const k of known.filter((k) => !checked.has(k.spool)))
    lines.push(`spool ${k.spool} of ${k.replica}: not here (run relay verify beside that replica)`);
  return lines;
}
