import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { createInterface } from 'node:readline/promises';
import type { Config } from '../config';
import { UsageError } from '../domain/errors';
import { maskCpf } from '../domain/privacy';
import { erasureId, parseSubjectCpf } from '../domain/subject';
import {
  countsOf,
  type PlaceReport,
  type SubjectReport,
  subjectExportOf,
  subjectJson,
} from '../core/subject-report';
import { subjectEverywhere } from '../subject-places';
import type { Output } from './log-commands';

/**
 * `subject find|export|erase <cpf>` (issue 45, docs/privacy.md): one person's data, everywhere the
 * receiver put it. Every use is a row of `console_audit` naming who ran it (`--by`, default the
 * system user). `erase` asks to confirm on a terminal (`--yes` for scripts), records its `--reason`,
 * and runs beside a live `serve` on the same file, in short transactions as `prune` does.
 */

export interface SubjectOptions {
  json?: boolean;
  out?: string;
  reason?: string;
  yes?: boolean;
  vacuum?: boolean;
  by?: string;
}

export async function subjectCommand(
  config: Config,
  action: 'find' | 'export' | 'erase',
  cpfInput: string,
  opts: SubjectOptions,
  io: Output,
  terminal: { input: NodeJS.ReadableStream & { isTTY?: boolean }; output: NodeJS.WritableStream } = {
    input: process.stdin,
    output: process.stderr,
  },
): Promise<void> {
  const parsed = parseSubjectCpf(cpfInput);
  if ('error' in parsed) throw new UsageError(`subject ${action}: ${parsed.error}`);
  const { cpf } = parsed;
  const reason = opts.reason?.trim();
  if (action === 'erase') {
    if (reason === undefined || reason === '')
      throw new UsageError(
        'subject erase needs --reason TEXT (recorded with the erasure: the request it answers)',
      );
    if (!opts.yes) await confirm(cpf, terminal);
  }
  const report = await subjectEverywhere(config, {
    action,
    cpf,
    ...(reason === undefined ? {} : { reason }),
    by: opts.by?.trim() || systemUser(),
    vacuum: opts.vacuum ?? false,
    ...(action === 'erase' ? { erasureId: erasureId(randomBytes(16)) } : {}),
    now: new Date(),
  });
  if (action === 'export') return exportTo(report, cpf, opts, io);
  if (opts.json) return io.out(JSON.stringify(subjectJson(report, action)));
  for (const line of linesOf(report, cpf)) io.out(line);
}

function systemUser(): string {
  try {
    return userInfo().username;
  } catch {
    return `uid ${process.getuid?.() ?? '?'}`;
  }
}

async function confirm(
  cpf: string,
  terminal: { input: NodeJS.ReadableStream & { isTTY?: boolean }; output: NodeJS.WritableStream },
): Promise<void> {
  if (!terminal.input.isTTY)
    throw new UsageError(
      'subject erase asks for confirmation on a terminal: pass --yes to erase from a script',
    );
  const rl = createInterface({ input: terminal.input, output: terminal.output });
  try {
    const answer = await rl.question(
      `Erase every piece of personal data of ${maskCpf(cpf)} the receiver holds? This cannot be undone. Type "erase" to go on: `,
    );
    if (answer.trim() !== 'erase') throw new UsageError('not erased: the answer was not "erase"');
  } finally {
    rl.close();
  }
}

function exportTo(report: SubjectReport, cpf: string, opts: SubjectOptions, io: Output): void {
  const text = `${JSON.stringify(subjectExportOf(report, cpf, new Date().toISOString()), null, 2)}\n`;
  if (opts.out === undefined) return io.out(text.trimEnd());
  writeFileSync(opts.out, text, { mode: 0o600 });
  io.out(`wrote ${opts.out}: everything held about ${maskCpf(cpf)} (mode 0600: it holds their data in full)`);
}

function linesOf(report: SubjectReport, cpf: string): string[] {
  const lines: string[] = [];
  const erased = report.log.erasure;
  lines.push(
    erased === undefined
      ? `${maskCpf(cpf)}: what the receiver holds`
      : `${maskCpf(cpf)}: erased (${erased.erasure_id}); what is left is the legal-hold set`,
  );
  const describe = (label: string, p: PlaceReport) => {
    const c = countsOf(p);
    lines.push(
      `${label} ${p.place}: ${c.proposals} proposal(s) (${c.proposals_with_personal_data} with personal data), ${c.events} event(s) (${c.events_with_body} with a body), ${c.averbacoes} averbação(ões), ${c.messages} message(s), ${c.deliveries} destination delivery(ies)` +
        (c.raw_copies === null ? '' : `, ${c.raw_copies} raw cop(ies) of the CPF in the file`),
    );
    if (c.recipients.length > 0) lines.push(`  shared with: ${c.recipients.join(', ')}`);
    for (const n of c.notices) lines.push(`  ${n.erasure_id} told to ${n.destination}: ${n.status}`);
    if (p.scrub?.walTruncated === false)
      lines.push('  the WAL could not be truncated yet (a reader held it): run again');
    // SQLite may leave old bytes in the unused gap of a page it rearranged, which secure_delete
    // does not zero (docs/privacy.md §6): the raw search finds them, and the answer is a rewrite.
    if (p.erasure !== undefined && (p.rawCopies ?? 0) > 0 && p.scrub?.vacuum === 'none')
      lines.push(
        `  ${p.rawCopies} cop(ies) left in unused space inside the file's pages: run again with --vacuum at a quiet moment (it holds the write lock while it rewrites the file)`,
      );
  };
  describe('log', report.log);
  if (report.spool !== null) describe('spool', report.spool);
  for (const b of report.backups)
    if ('missing' in b) lines.push(`backup ${b.place}: missing (moved or deleted)`);
    else describe('backup', b);
  if (report.journal !== null) lines.push(`erasure recorded in ${report.journal}`);
  return lines;
}
