import { userInfo } from 'node:os';
import {
  type AverbacaoAccepted,
  type ProposalRequest,
  REPORT_PATHS,
  type ReportName,
  type ServiceClient,
  serviceClientFromConfig,
} from '../client';
import type { Config } from '../config';
import { EVENTOS } from '../domain/catalogue';
import { ConfigError, UsageError } from '../domain/errors';
import { isObject, type JsonObject, parseJsonOrUndefined } from '../domain/json';
import { maskCpfsInJsonText } from '../domain/privacy';
import { createLogger } from '../logger';
import { parseNuProposta } from '../domain/log-rows';
import { recordCommandAudit, withCommandStore } from '../open-store';
import type { Output } from './log-commands';

/**
 * The service API calls a partner needs (contract §2; interface §4.1–§4.7), as thin commands over
 * the client. Business errors print their code and message and exit non-zero (bin.ts).
 */

function serviceClient(config: Config, command: string): ServiceClient {
  // Warnings (e.g. Deprecation: true) go to stderr as JSON lines; stdout stays the command's answer.
  const logger = createLogger(config.logLevel === 'info' ? 'warn' : config.logLevel, process.stderr);
  const client = serviceClientFromConfig(config, logger);
  if (client === null)
    throw new ConfigError('SERVICE_BASE_URL', `required for ${command}: the {base_url} of the service`);
  return client;
}

function jsonObjectOption(text: string | undefined, flag: string): JsonObject {
  if (text === undefined) return {};
  const value = parseJsonOrUndefined(text);
  if (value === undefined) throw new UsageError(`${flag} expects a JSON object, got ${text.slice(0, 60)}`);
  if (!isObject(value)) throw new UsageError(`${flag} expects a JSON object`);
  return value;
}

function numberOption(value: string | undefined, flag: string): number {
  const n = Number(value);
  if (value === undefined || value.trim() === '' || !Number.isFinite(n))
    throw new UsageError(`${flag} expects a number, got "${value ?? ''}"`);
  return n;
}

export interface CreateProposalOptions {
  cpf?: string;
  cnpj?: string;
  amount?: string;
  installments?: string;
  pix?: string;
  banco?: string;
  agencia?: string;
  conta?: string;
  json?: boolean;
}

export async function createProposalCommand(
  config: Config,
  o: CreateProposalOptions,
  io: Output,
): Promise<void> {
  if (!o.cpf || !o.cnpj) throw new UsageError('create-proposal needs --cpf and --cnpj');
  const dados_bancarios: Record<string, string> = {};
  for (const k of ['pix', 'banco', 'agencia', 'conta'] as const)
    if (o[k] !== undefined) dados_bancarios[k] = o[k] as string;
  const body: ProposalRequest = {
    nu_cpf: o.cpf,
    nu_cnpj_conveniada: o.cnpj,
    vl_emprestimo: numberOption(o.amount, '--amount'),
    qt_parcela: numberOption(o.installments, '--installments'),
    dados_bancarios,
  };
  const created = await serviceClient(config, 'create-proposal').createProposal(body);
  if (o.json) return io.out(JSON.stringify(created.raw ?? created));
  io.out(
    `proposal ${created.nu_proposta} created: ${created.status} (uuid ${created.uuid ?? '-'}, ${created.dt_criacao ?? ''})`,
  );
}

export async function startAverbacaoCommand(
  config: Config,
  o: { proposal?: string; body?: string; deprecatedPath?: boolean; track?: boolean; json?: boolean },
  io: Output,
): Promise<void> {
  const body = jsonObjectOption(o.body, '--body');
  const nu = o.proposal === undefined ? null : parseNuProposta(o.proposal);
  if (nu !== null && body.nu_proposta === undefined) body.nu_proposta = nu;
  const accepted = await serviceClient(config, 'start-averbacao').startAverbacao(body, {
    deprecatedPath: o.deprecatedPath ?? false,
  });
  const tracked = o.track !== false;
  const trackedIn = tracked ? await trackStarted(config, accepted, nu) : null;
  if (o.json)
    return io.out(JSON.stringify({ requestId: accepted.requestId, status: accepted.status, tracked }));
  io.out(
    `averbação accepted: requestId ${accepted.requestId}, status ${accepted.status ?? '-'}` +
      (tracked ? ` — tracked in ${trackedIn} (webhook, or polling after REGISTRY_WEBHOOK_GRACE_MS)` : ''),
  );
}

/**
 * Tracks an averbação this process started (`start-averbacao`, the demo), so that the receivers
 * wait for its result webhook and poll when it does not come: in the SQLite file (created if need
 * be), or in cluster mode in PostgreSQL, where every replica's poller sees it.
 */
export async function trackStarted(
  config: Config,
  accepted: AverbacaoAccepted,
  nu: number | string | null,
): Promise<string> {
  return withCommandStore(
    config,
    { access: 'write', command: 'start-averbacao', create: true },
    async (log) => {
      await log.track(
        {
          requestId: accepted.requestId,
          correlationId: accepted.correlationId,
          nuProposta: nu,
          via: 'started',
        },
        new Date(),
        config.registry.webhookGraceMs,
      );
      return log.name;
    },
  );
}

export async function requestStatusCommand(
  config: Config,
  requestId: string,
  o: { json?: boolean },
  io: Output,
): Promise<void> {
  const status = await serviceClient(config, 'request-status').requestStatus(requestId);
  if (o.json) return io.out(JSON.stringify(status.raw ?? status));
  io.out(`${status.requestId}: ${status.status} (correlationId ${status.correlationId ?? '-'})`);
}

export async function registerWebhookCommand(
  config: Config,
  o: { url?: string; eventos?: string; secret?: string; json?: boolean },
  io: Output,
): Promise<void> {
  if (!o.url)
    throw new UsageError('register-webhook needs --url (this receiver’s public URL, ending in /webhooks)');
  const secret = o.secret ?? config.webhookSecrets[0];
  if (!secret) throw new ConfigError('WEBHOOK_SECRETS', 'required for register-webhook (or pass --secret)');
  const eventos = o.eventos ? listOption(o.eventos) : [...EVENTOS];
  const registered = await serviceClient(config, 'register-webhook').registerWebhook({
    url: o.url,
    eventos,
    secret,
  });
  if (o.json) return io.out(JSON.stringify(registered.raw ?? {}));
  io.out(`webhook registered (HTTP ${registered.httpStatus}): ${o.url} for ${eventos.length} event(s)`);
}

/** `a, b,c` → `['a', 'b', 'c']`. */
function listOption(value: string): string[] {
  return value
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item !== '');
}

/**
 * `report <name>`: the service's answer as JSON, every CPF in it masked (domain/privacy.ts): the
 * reports list borrowers with their salary, employer and dates (LGPD, issue 45). `--full-cpf`
 * prints them in full: recorded first in `console_audit` (`report_full_cpf`, target the report, the
 * OS user as `person`) when there is a log, and said on stderr. A log that takes no write stops
 * the command before anything is printed.
 */
export async function reportCommand(
  config: Config,
  name: string,
  o: { param?: string[]; fullCpf?: boolean },
  io: Output,
  err: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
): Promise<void> {
  if (!Object.hasOwn(REPORT_PATHS, name)) {
    throw new UsageError(`unknown report "${name}" (reports: ${Object.keys(REPORT_PATHS).join(', ')})`);
  }
  const query = paramOptions(o.param ?? []);
  const answer = JSON.stringify(
    await serviceClient(config, 'report').report(name as ReportName, query),
    null,
    2,
  );
  if (o.fullCpf !== true) return io.out(maskCpfsInJsonText(answer));
  const recordedIn = await recordCommandAudit(config, 'report', {
    at: new Date().toISOString(),
    role: 'admin',
    session: null,
    person: osUser(),
    action: 'report_full_cpf',
    target: name,
    detail: { params: query },
    ip: null,
  });
  err(
    `consig-receiver: warning: this output holds CPFs in full (personal data, LGPD); ` +
      (recordedIn === null
        ? `not recorded: no log at ${config.databasePath} (set DATABASE_PATH or DATABASE_URL)`
        : `recorded in console_audit at ${recordedIn}`),
  );
  io.out(answer);
}

/** Who ran the command, as the audit names them: the OS user, else the uid. */
function osUser(): string {
  try {
    return userInfo().username;
  } catch {
    // A uid with no entry in the password database (a container's arbitrary user).
    return `uid ${process.getuid?.() ?? 'unknown'}`;
  }
}

/** Repeated `--param key=value` → `{ key: value }`; the value may contain `=`. */
function paramOptions(params: readonly string[]): Record<string, string> {
  const query: Record<string, string> = {};
  for (const p of params) {
    const i = p.indexOf('=');
    if (i < 1) throw new UsageError(`--param expects key=value, got "${p}"`);
    query[p.slice(0, i)] = p.slice(i + 1);
  }
  return query;
}

export async function offersCommand(
  config: Config,
  o: { body?: string; maxPages?: string },
  io: Output,
): Promise<void> {
  const body = jsonObjectOption(o.body, '--body');
  const options = o.maxPages === undefined ? {} : { maxPages: numberOption(o.maxPages, '--max-pages') };
  const result = await serviceClient(config, 'offers').searchOffers(body, options);
  io.out(JSON.stringify(result, null, 2));
}
