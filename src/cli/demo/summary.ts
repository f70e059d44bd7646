import type { Store } from '../../sqlite/store';
import type { Output } from '../log-commands';
import { renderTable } from '../table';
import type { DrivenProposal } from './scenarios';

/** The table printed at the end of the demo: where each proposal ended, read from the receiver's database. */

// A type, not an interface: renderTable takes records, and only a type alias is assignable to one.
export type SummaryRow = {
  nu_proposta: number;
  path: string;
  stage: string | undefined;
  status: string | undefined;
  events: number;
  duplicates: number;
  /** Events whose transition was not applied: they arrived after the proposal had moved past them. */
  late: number;
  averbacao: string;
  ok: 'yes' | 'NO';
};

const COLUMNS = ['nu_proposta', 'path', 'stage', 'status', 'events', 'duplicates', 'late', 'averbacao', 'ok'];

export function summaryRow(store: Store, { nu, scenario }: DrivenProposal): SummaryRow {
  const proposal = store.proposals.get(nu);
  const timeline = store.proposals.timeline(nu);
  const averbacao = store.averbacoes.list({ nuProposta: nu })[0];
  const expected = scenario.expect;
  const ok =
    proposal?.status === expected.status &&
    (expected.averbacao === undefined ||
      (averbacao?.status === expected.averbacao.status &&
        averbacao.result_source === expected.averbacao.source));
  return {
    nu_proposta: nu,
    path: scenario.label,
    stage: proposal?.stage,
    status: proposal?.status,
    events: timeline.length,
    duplicates: timeline.reduce((n, t) => n + t.duplicates, 0),
    late: timeline.filter((t) => t.applied === 0).length,
    averbacao: averbacao ? `${averbacao.status} via ${averbacao.result_source ?? '-'}` : '-',
    ok: ok ? 'yes' : 'NO',
  };
}

/** The table of proposals. */
export function printSummary(io: Output, rows: readonly SummaryRow[]): void {
  io.out('');
  io.out(renderTable(COLUMNS, rows));
}

/**
 * Where the database, the log and the destinations file are, and a few commands to look into them,
 * written as they run from the checkout the demo ran in (`npx`: the package's bin is not on PATH).
 */
export function printWhereToLook(
  io: Output,
  files: { dbPath: string; logPath: string; destinationsPath: string },
  nuProposta: number | undefined,
): void {
  const { dbPath, logPath, destinationsPath } = files;
  io.out('');
  io.out(`SQLite log: ${dbPath}   (receiver log: ${logPath}; destinations: ${destinationsPath})`);
  io.out(`  npx consig-receiver proposal ${nuProposta} --database ${dbPath}`);
  io.out(`  npx consig-receiver stats --database ${dbPath}`);
  io.out(
    `  npx consig-receiver forwards list --destination warehouse --proposal ${nuProposta} --database ${dbPath}`,
  );
  io.out(`  sqlite3 ${dbPath} "SELECT nu_proposta, stage, status FROM proposals"`);
}
