#!/usr/bin/env node
import { Command, CommanderError } from 'commander';
import { type Config, loadConfig } from '../config';
import { ConsigError } from '../domain/errors';
import { migrateCommand } from './migrate-command';
import {
  averbacoesCommand,
  deliveriesCommand,
  eventsCommand,
  proposalCommand,
  proposalsCommand,
  statsCommand,
} from './log-commands';
import { registerForwardCommands } from './forward-commands';
import { replayCommand } from './pipeline-commands';
import { relayVerifyCommand } from './relay-command';
import { backupCommand } from './backup-command';
import { pruneCommand } from './prune-command';
import { demoCommand } from './demo';
import { lenderCommand } from './lender-command';
import { trackCommand } from './registry-commands';
import { sendTestEventCommand } from './send-test-event';
import { simulateCommand } from './simulate-command';
import {
  createProposalCommand,
  offersCommand,
  registerWebhookCommand,
  reportCommand,
  requestStatusCommand,
  startAverbacaoCommand,
} from './service-commands';
import { serve } from './serve';
import { endSessionsCommand } from './session-commands';
import { subjectCommand } from './subject-command';
import { packageVersion } from '../package-version';

/**
 * `consig-receiver` (contract §2). Each command is a thin wrapper over the modules; errors become one
 * line on stderr and a non-zero exit code.
 */

const io = { out: (text: string) => process.stdout.write(`${text}\n`) };

function config(program: Command, requireSecrets = false): Config {
  const env = { ...process.env };
  const db = program.opts<{ database?: string }>().database;
  if (db) env.DATABASE_PATH = db;
  return loadConfig(env, { requireSecrets });
}

export function buildProgram(): Command {
  const program = new Command('consig-receiver')
    .description('Partner-side receiver for the consigned-loan service webhooks')
    .version(packageVersion(), '-V, --version', 'print the version')
    .option('--database <path>', 'SQLite file (overrides DATABASE_PATH)')
    .showHelpAfterError('(run with --help for usage)')
    .exitOverride();

  registerDatabaseCommands(program);
  registerLogCommands(program);
  registerSubjectCommands(program);
  registerForwardCommands(program, () => config(program), {
    ...io,
    err: (text: string) => process.stderr.write(`${text}\n`),
  });
  registerServiceCommands(program);
  registerToolCommands(program);
  return program;
}

/** `serve` and `migrate`. */
function registerDatabaseCommands(program: Command): void {
  program
    .command('serve', { isDefault: true })
    .description(
      'migrate the database, then run the HTTP receiver, the pipeline (one turn at a time: the events of one proposal in the order received, proposals interleaved; QUEUE_CONCURRENCY is ignored) and the registry poller',
    )
    .action(async () => {
      await serve(config(program, true));
    });

  program
    .command('migrate')
    .description(
      'apply pending migrations and exit: with DATABASE_URL, PostgreSQL (migrations-pg/, under an advisory lock) then the spool at DATABASE_PATH if it exists; else the SQLite file (migrations/)',
    )
    .option('--dry-run', 'list what would be applied (files and their compat), change nothing')
    .option('--json', 'JSON for scripts')
    .action((opts: { dryRun?: boolean; json?: boolean }) =>
      migrateCommand(config(program), opts, { ...io, err: (text) => process.stderr.write(`${text}\n`) }),
    );
}

/**
 * Reading the log and acting on it: `events`, `deliveries`, `stats`, `proposal`, `proposals`, `replay`.
 * Like `averbacoes`, `track` and `forwards`, they act on PostgreSQL when DATABASE_URL is set (cluster
 * mode, contract §10), else on the SQLite file (src/open-store.ts chooses); each returns a promise,
 * which parseAsync awaits, so a failure still ends in main's one line and exit code.
 */
function registerLogCommands(program: Command): void {
  program
    .command('events')
    .description('list stored events, newest first')
    .option('--status <status>', 'pending | done | failed | dead | ignored | invalid')
    .option('--evento <evento>', 'event name, e.g. proposta.aprovada')
    .option('--proposal <nu_proposta>', 'only this proposal')
    .option('--kind <kind>', 'event | registry | poll')
    .option('--limit <n>', 'rows (default 50)')
    .option('--json', 'JSON for scripts')
    .action((opts) => eventsCommand(config(program), opts, io));

  program
    .command('deliveries')
    .description('list HTTP deliveries to the webhook routes, newest first')
    .option(
      '--outcome <outcome>',
      'accepted | duplicate | quarantined | invalid_signature | payload_too_large | storage_unavailable | aborted',
    )
    .option('--limit <n>', 'rows (default 50)')
    .option('--json', 'JSON for scripts')
    .action((opts) => deliveriesCommand(config(program), opts, io));

  program
    .command('stats')
    .description('counts by status and outcome, duplicates, acknowledgement latency')
    .option('--json', 'JSON for scripts')
    .action((opts) => statsCommand(config(program), opts, io));

  program
    .command('proposal')
    .description("a proposal's status and timeline: each event, when it arrived, from → to, applied or not")
    .argument('<nu_proposta>')
    .option('--json', 'JSON for scripts')
    .action((nu: string, opts) => proposalCommand(config(program), nu, opts, io));

  program
    .command('proposals')
    .description(
      'proposals by status, most recently changed first; --stuck: those unchanged for longer than STUCK_AFTER allows, longest first',
    )
    .option('--status <status>', 'em_analise | pre_aprovada | aprovada | … | paga (contract §6)')
    .option('--stuck', 'only stuck proposals, with when they became stuck and their limit')
    .option('--limit <n>', 'rows (default 50)')
    .option('--json', 'JSON for scripts')
    .action((opts) => proposalsCommand(config(program), opts, io));

  program
    .command('end-sessions')
    .description(
      'sign everyone out of the console: every session ends at once (with DATABASE_URL: at every replica); audited',
    )
    .option('--json', 'JSON for scripts')
    .action((opts) => endSessionsCommand(config(program), opts, io));

  program
    .command('replay')
    .description('put events back in the queue (a running receiver picks them up)')
    .argument('[event-ids...]')
    .option('--status <status>', 'every event with this status: dead | failed | done')
    .option('--json', 'JSON for scripts')
    .action((ids: string[], opts) => replayCommand(config(program), ids, opts, io));
}

/** `subject find|export|erase <cpf>`: one person's data (issue 45, docs/privacy.md). */
function registerSubjectCommands(program: Command): void {
  const subject = program
    .command('subject')
    .description(
      "one person's data (LGPD), by CPF: find where it is, export it, erase it — in the log, the spool, the backups `backup` made; audited",
    );
  for (const [action, about] of [
    ['find', 'where the receiver holds the data of the person with this CPF, with counts per place'],
    ['export', 'everything held about the person, with the ledger of sharing, as JSON (docs/privacy.md)'],
    [
      'erase',
      "remove the person's data from every place; what the law makes the lender keep stays (docs/privacy.md)",
    ],
  ] as const) {
    const command = subject
      .command(action)
      .description(about)
      .argument('<cpf>')
      .option('--by <name>', 'who asks, for the audit (default: the system user)')
      .option('--json', 'JSON for scripts');
    if (action === 'export') command.option('--out <file>', 'write the JSON to this file (mode 0600)');
    if (action === 'erase')
      command
        .option('--reason <text>', 'why: the request this answers (required, recorded)')
        .option('--yes', 'do not ask to confirm (scripts)')
        .option(
          '--vacuum',
          'rewrite the file when stale copies are left in its free space (holds the write lock while it runs)',
        );
    command.action((cpf: string, opts) => subjectCommand(config(program), action, cpf, opts, io));
  }
}

/** Averbação tracking and the service's API (interface §4). */
function registerServiceCommands(program: Command): void {
  program
    .command('averbacoes')
    .description('tracked registrations (averbações): status, where the result came from, polling')
    .option('--status <status>', 'queued | processing | completed | error')
    .option('--stale', 'only those still not final after REGISTRY_POLL_MAX_AGE_MS')
    .option('--proposal <nu_proposta>', 'only this proposal')
    .option('--limit <n>', 'rows (default 50)')
    .option('--json', 'JSON for scripts')
    .action((opts) => averbacoesCommand(config(program), opts, io));

  program
    .command('track')
    .description(
      'follow a registration (requestId): the webhook or, when it is late, the poller brings its result',
    )
    .argument('<requestId>')
    .option('--proposal <nu_proposta>', 'the proposal it belongs to')
    .option('--json', 'JSON for scripts')
    .action((requestId: string, opts) => trackCommand(config(program), requestId, opts, io));

  program
    .command('start-averbacao')
    .description('POST /contract/averbacao (interface §4.2) and track the requestId it returns')
    .option('--proposal <nu_proposta>', 'the proposal (sent as nu_proposta unless --body has it)')
    .option('--body <json>', 'the request body (its fields are "not shown" in the seed)')
    .option('--deprecated-path', 'use the deprecated POST /contract')
    .option('--no-track', 'do not track it in the database')
    .option('--json', 'JSON for scripts')
    .action((opts) => startAverbacaoCommand(config(program), opts, io));

  program
    .command('request-status')
    .description('GET /request/:requestId (interface §4.3), never the broken _links.result')
    .argument('<requestId>')
    .option('--json', 'the raw answer')
    .action((requestId: string, opts) => requestStatusCommand(config(program), requestId, opts, io));

  program
    .command('register-webhook')
    .description('POST /api/v1/webhooks (interface §4.5): register this receiver as the callback URL')
    .option('--url <url>', "this receiver's public URL, e.g. https://partner.example/webhooks")
    .option('--eventos <list>', 'comma-separated event names (default: all 13)')
    .option('--secret <secret>', 'the shared secret (default: the first of WEBHOOK_SECRETS)')
    .option('--json', 'the raw answer')
    .action((opts) => registerWebhookCommand(config(program), opts, io));

  program
    .command('create-proposal')
    .description(
      'POST /api/v1/propostas (interface §4.1), validated before sending (CPF/CNPJ check digits, 6–96 instalments)',
    )
    .option('--cpf <cpf>', "the employee's CPF")
    .option('--cnpj <cnpj>', "the company's CNPJ (numeric or alphanumeric)")
    .option('--amount <reais>', 'vl_emprestimo')
    .option('--installments <n>', 'qt_parcela, 6 to 96')
    .option('--pix <key>', 'dados_bancarios.pix')
    .option('--banco <code>', 'dados_bancarios.banco')
    .option('--agencia <n>', 'dados_bancarios.agencia')
    .option('--conta <n>', 'dados_bancarios.conta')
    .option('--json', 'the raw answer')
    .action((opts) => createProposalCommand(config(program), opts, io));

  program
    .command('report')
    .description(
      'one of the four portfolio reports (interface §4.6): new-relationships, relationship-ended, accounting-and-remuneration, repasse-pagamentos',
    )
    .argument('<name>')
    .option('--param <key=value...>', 'query parameters, passed through')
    .option('--full-cpf', 'print every CPF in full (audited in console_audit; default: masked)')
    .action((name: string, opts) => reportCommand(config(program), name, opts, io));

  program
    .command('offers')
    .description('POST /offers/search (public, interface §4.7), following its pages')
    .option('--body <json>', 'the search body')
    .option('--max-pages <n>', 'pages to follow at most (default 10)')
    .action((opts) => offersCommand(config(program), opts, io));
}

/** Tools around the receiver: `send-test-event`, `backup`, `simulate`, `lender`, `demo`, `prune`. */
function registerToolCommands(program: Command): void {
  program
    .command('send-test-event')
    .description(
      'sign and POST one realistic delivery to a receiver (registry: a registry result); exits ≠ 0 unless 200',
    )
    .argument('<evento>', 'a catalogue event name, or registry')
    .option('--url <url>', 'the receiver, e.g. http://127.0.0.1:3000/webhooks')
    .option('--secret <secret>', 'the shared secret')
    .option('--proposal <nu_proposta>', 'nu_proposta in dados (default 100001)')
    .option('--request-id <id>', 'requestId (registry and averbacao.* events)')
    .option('--status <status>', 'registry status (default completed)')
    .option('--header <name>', 'signature header name (default X-Service-Signature)')
    .option('--webhook-id <id>', 'metadata.webhook_id (default: a fresh one)')
    .option('--json', 'JSON for scripts')
    .action((evento: string, opts) => sendTestEventCommand(evento, opts, io));

  program
    .command('backup')
    .description('a consistent online copy of the database (SQLite backup API), safe while serve runs')
    .argument('<file>')
    .option('--force', 'overwrite an existing file')
    .option('--json', 'JSON for scripts')
    .action((file: string, opts) => backupCommand(config(program), file, opts, io));

  program
    .command('simulate')
    .description(
      "run the service simulator (the service's side: webhooks, proposals, averbação, registry) for sandboxes",
    )
    .option('--port <n>', 'port (default 4010)')
    .option('--host <host>', 'host (default 127.0.0.1)')
    .option('--json', 'print its addresses as JSON')
    .action((opts) => simulateCommand(opts, io));

  program
    .command('lender')
    .description(
      "run a lender's consumer of forwarded messages: verifies Standard Webhooks signatures (401 if bad), prints each message",
    )
    .option(
      '--secret <secret>',
      'the destination secret (whsec_… or any string); repeat for a rotation',
      (v: string, all: string[] = []) => [...all, v],
    )
    .option('--port <n>', 'port (default 4020)')
    .option('--host <host>', 'host (default 127.0.0.1)')
    .option('--fail-first <n>', 'answer 503 to the first n messages, to watch the receiver retry')
    .action((opts) => lenderCommand(opts, io));

  program
    .command('demo')
    .description(
      'receiver + simulator + a few proposals driven end to end, printing their progress (no configuration)',
    )
    .action(async () => {
      const db = program.opts<{ database?: string }>().database;
      await demoCommand(db ? { database: db } : {}, io);
    });

  program
    .command('prune')
    .description(
      'remove raw bodies of finished events, and forwarded messages delivered everywhere, older than --days (default RETENTION_DAYS); rows and dedup keys stay. With DATABASE_URL: PostgreSQL, then the relayed rows of the spool at DATABASE_PATH',
    )
    .option('--days <n>', 'retention in days')
    .option('--json', 'JSON for scripts')
    .action((opts) => pruneCommand(config(program), opts, io));

  program
    .command('relay')
    .description("cluster mode: the relay from a replica's spool to PostgreSQL")
    .command('verify')
    .description(
      'whether PostgreSQL holds every delivery each spool (default DATABASE_PATH) counts as relayed; exits 1 while one does not (after a failover that lost commits)',
    )
    .argument('[spools...]', 'spool files (default DATABASE_PATH)')
    .option('--json', 'JSON for scripts')
    .action((paths: string[], opts) => relayVerifyCommand(config(program), paths, opts, io));
}

export async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  // `serve` is the default command; a first word that names no command is a typo, not serve's argument.
  const first = argv[2];
  if (
    first !== undefined &&
    !first.startsWith('-') &&
    !program.commands.some((c) => c.name() === first || c.aliases().includes(first)) &&
    first !== 'help'
  ) {
    process.stderr.write(
      `consig-receiver: unknown command '${first}' (commands: ${program.commands.map((c) => c.name()).join(', ')})\n`,
    );
    return 2;
  }
  try {
    await program.parseAsync(argv);
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      // Help and version exit 0; usage errors were already printed by commander.
      return err.exitCode === 0 ? 0 : 2;
    }
    const message = err instanceof Error ? err.message : String(err);
    // A business error of the service: its own code and (Portuguese) message, on one line.
    const business = err as { code?: string; error?: string };
    const line =
      business.code === 'SERVICE_BUSINESS_ERROR' && business.error
        ? `${business.error}: ${message}`
        : message;
    process.stderr.write(`consig-receiver: ${line.replace(/\s*\n\s*/g, ' ')}\n`);
    return err instanceof ConsigError && ['CONFIG_INVALID', 'USAGE', 'INVALID_REQUEST'].includes(err.code)
      ? 2
      : 1;
  }
}

if (require.main === module) {
  main(process.argv).then((code) => {
    if (code !== 0) process.exitCode = code;
  });
}
