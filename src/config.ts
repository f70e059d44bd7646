import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { z } from 'zod';
import { type Destination, resolveDestinations } from './domain/forwarding/destinations';
import { secretKey } from './domain/forwarding/standard-webhooks';
import { type IpAllowList, parseAllowList } from './domain/cidr';
import { parseDuration } from './domain/duration';
import { ConfigError } from './domain/errors';
import { parseStuckAfter, type StuckLimits } from './domain/stuck';

/**
 * contract §3. `loadConfig(env)` returns a frozen Config or throws one ConfigError naming the first
 * bad variable and what it expects. Secrets come from the environment only.
 */

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
const SYNCHRONOUS = ['FULL', 'EXTRA', 'NORMAL'] as const;
/** The OTLP exporters the receiver ships (no gRPC one). */
const otlpProtocols = ['http/protobuf', 'http/json'] as const;

function int(min: number, max: number, fallback: number) {
  return z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v.trim() === '') return fallback;
      const n = /^-?\d+$/.test(v.trim()) ? Number(v.trim()) : Number.NaN;
      if (!Number.isSafeInteger(n) || n < min || n > max) {
        ctx.addIssue({ code: 'custom', message: `expected an integer from ${min} to ${max}, got "${v}"` });
        return z.NEVER;
      }
      return n;
    });
}

function optionalText() {
  return z
    .string()
    .optional()
    .transform((v) => (v === undefined || v.trim() === '' ? undefined : v.trim()));
}

/** Fewest characters an ADMIN_TOKEN or VIEWER_TOKEN may have: a guessable token is a way in. */
export const MIN_TOKEN_CHARS = 16;

/** A bearer token: unset, or at least {@link MIN_TOKEN_CHARS} characters (its value is never echoed). */
function optionalToken() {
  return optionalText().superRefine((v, ctx) => {
    if (v !== undefined && v.length < MIN_TOKEN_CHARS)
      ctx.addIssue({
        code: 'custom',
        message: `expected at least ${MIN_TOKEN_CHARS} characters (a long random string, e.g. openssl rand -hex 32), got ${v.length}`,
      });
  });
}

/**
 * A URL of the service's API (SERVICE_BASE_URL, SERVICE_TOKEN_URL): https, or http on a loopback
 * host only (the simulator, a sidecar that originates TLS). Every call carries the bearer token, and
 * the token request the client secret: plain http across a network would carry them in the clear.
 */
function serviceUrl() {
  return optionalText().superRefine((v, ctx) => {
    if (v === undefined) return;
    if (!isHttpsOrLoopback(v, { query: true }))
      ctx.addIssue({
        code: 'custom',
        message: `expected an https URL (http only on a loopback host: the token travels with every call), got "${v}"`,
      });
  });
}

/** https, or http to a loopback host; `query: false` refuses a query or a fragment too. */
function isHttpsOrLoopback(value: string, { query }: { query: boolean }): boolean {
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    return false;
  }
  if (!query && (u.search !== '' || u.hash !== '')) return false;
  return u.protocol === 'https:' || (u.protocol === 'http:' && isLoopbackHost(u.hostname));
}

/** A comma-separated list: each value trimmed, empty ones dropped; unset or empty → []. */
function list() {
  return optionalText().transform((v) => (v === undefined ? [] : splitSecrets(v)));
}

/** How long a console session lasts: a duration from 5m to 30d (`defaultMs` when unset). */
function sessionDuration(defaultMs: number) {
  return optionalText().transform((v, ctx) => {
    if (v === undefined) return defaultMs;
    const ms = parseDuration(v);
    if (ms === null || ms < 300_000 || ms > 30 * 86_400_000) {
      ctx.addIssue({
        code: 'custom',
        message: `expected a duration from 5m to 30d such as 30m, 8h or 7d, got "${v}"`,
      });
      return z.NEVER;
    }
    return ms;
  });
}

/**
 * A URL the console's sign-in depends on (OIDC_ISSUER, PUBLIC_URL): https, or http on a loopback
 * host only (a provider and a receiver on one machine, as the tests run them). Plain http across a
 * network would carry the sign-in's code and cookies in the clear.
 */
function signInUrl() {
  return optionalText().superRefine((v, ctx) => {
    if (v === undefined) return;
    if (!isHttpsOrLoopback(v, { query: false }))
      ctx.addIssue({
        code: 'custom',
        message: `expected an https URL without query (http only on a loopback host), got "${v}"`,
      });
  });
}

/** 127.0.0.0/8, ::1 and localhost: the only hosts a sign-in URL may reach over plain http. */
export function isLoopbackHost(hostname: string): boolean {
  return hostname === 'localhost' || hostname === '[::1]' || /^127(\.\d{1,3}){3}$/.test(hostname);
}

function oneOf<T extends readonly string[]>(values: T, fallback: T[number]) {
  return z
    .string()
    .optional()
    .transform((v, ctx): T[number] => {
      if (v === undefined || v.trim() === '') return fallback;
      const wanted = v.trim();
      const found = values.find((x) => x.toLowerCase() === wanted.toLowerCase());
      if (found === undefined) {
        ctx.addIssue({ code: 'custom', message: `expected one of ${values.join(', ')}, got "${v}"` });
        return z.NEVER;
      }
      return found;
    });
}

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

const schema = z.object({
  PORT: int(0, 65535, 3000),
  HOST: optionalText().transform((v) => v ?? '0.0.0.0'),
  DATABASE_PATH: optionalText().transform((v) => v ?? './data/consig.db'),
  WEBHOOK_SECRETS: optionalText(),
  WEBHOOK_SECRET: optionalText(),
  SIGNATURE_HEADER: optionalText()
    .transform((v) => v ?? 'X-Service-Signature')
    .refine((v) => HEADER_NAME.test(v), { message: 'expected an HTTP header name' }),
  MAX_BODY_BYTES: int(1, 64 * 1024 * 1024, 262144),
  SERVICE_BASE_URL: serviceUrl(),
  SERVICE_ACCESS_TOKEN: optionalText(),
  SERVICE_TOKEN_URL: serviceUrl(),
  SERVICE_CLIENT_ID: optionalText(),
  SERVICE_CLIENT_SECRET: optionalText(),
  SERVICE_API_KEY: optionalText(),
  REGISTRY_WEBHOOK_GRACE_MS: int(0, 2 ** 31, 120000),
  REGISTRY_POLL_INTERVAL_MS: int(1, 2 ** 31, 30000),
  REGISTRY_POLL_MAX_INTERVAL_MS: int(1, 2 ** 31, 900000),
  REGISTRY_POLL_MAX_AGE_MS: int(1, 2 ** 40, 172800000),
  // Read only to warn that it is ignored (see `warnings`).
  QUEUE_CONCURRENCY: optionalText(),
  HANDLER_MAX_ATTEMPTS: int(1, 1000, 8),
  PROCESSING_LEASE_MS: int(500, 600000, 3000),
  ADMIN_TOKEN: optionalToken(),
  VIEWER_TOKEN: optionalToken(),
  CONSOLE_SESSION_TTL: sessionDuration(8 * 3_600_000),
  OIDC_ISSUER: signInUrl(),
  OIDC_CLIENT_ID: optionalText(),
  OIDC_CLIENT_SECRET: optionalText(),
  PUBLIC_URL: signInUrl(),
  OIDC_SCOPES: optionalText()
    .transform((v) => (v ?? 'openid email profile').split(/\s+/).filter((x) => x !== ''))
    .refine((v) => v.includes('openid'), { message: 'expected space-separated scopes including openid' }),
  OIDC_GROUPS_CLAIM: optionalText().transform((v) => v ?? 'groups'),
  OIDC_ADMIN_GROUPS: list(),
  OIDC_VIEWER_GROUPS: list(),
  OIDC_SESSION_TTL: sessionDuration(3_600_000),
  CONSOLE_BREAK_GLASS: oneOf(['false', 'true'] as const, 'false'),
  LOG_LEVEL: oneOf(LOG_LEVELS, 'info'),
  SQLITE_SYNCHRONOUS: oneOf(SYNCHRONOUS, 'FULL'),
  SQLITE_BUSY_TIMEOUT_MS: int(0, 60000, 1000),
  GROUP_COMMIT_MAX_BATCH: int(1, 10000, 512),
  SHUTDOWN_TIMEOUT_MS: int(0, 600000, 10000),
  // Issue 46: `false` for a deployment that runs `consig-receiver migrate` as a step of its own.
  MIGRATE_ON_START: oneOf(['false', 'true'] as const, 'true'),
  RETENTION_DAYS: optionalText().superRefine((v, ctx) => {
    if (v !== undefined && !(/^\d{1,5}$/.test(v) && Number(v) >= 1)) {
      ctx.addIssue({
        code: 'custom',
        message: `expected a number of days ≥ 1 (unset keeps everything), got "${v}"`,
      });
    }
  }),
  ALLOWED_CIDRS: optionalText().superRefine((v, ctx) => {
    if (v === undefined) return;
    try {
      parseAllowList(v);
    } catch (err) {
      ctx.addIssue({
        code: 'custom',
        message: `expected comma-separated IP addresses or CIDRs: ${(err as Error).message}`,
      });
    }
  }),
  TRUST_PROXY: int(0, 10, 0),
  // One hour: long enough that a quiet night with proposals waiting on the employer is not an
  // alarm every few minutes, short enough to re-activate the callback the same morning.
  DELIVERY_SILENCE_ALARM_MS: int(0, 2 ** 40, 3_600_000),
  FORWARD_URL: optionalText(),
  FORWARD_SECRET: optionalText(),
  DESTINATIONS_FILE: optionalText(),
  FEED_FULL_CPF: oneOf(['false', 'true'] as const, 'false'),
  FEED_ENABLED: oneOf(['false', 'true'] as const, 'false'),
  DATABASE_URL: optionalText().superRefine((v, ctx) => {
    if (v === undefined) return;
    let ok = false;
    try {
      const u = new URL(v);
      ok = (u.protocol === 'postgres:' || u.protocol === 'postgresql:') && u.pathname.length > 1;
    } catch {
      ok = false;
    }
    // Never echo the value: it may hold a password.
    if (!ok)
      ctx.addIssue({ code: 'custom', message: 'expected postgres://user:password@host:port/database' });
  }),
  REPLICA_ID: optionalText().superRefine((v, ctx) => {
    if (v !== undefined && !/^[A-Za-z0-9._-]{1,64}$/.test(v))
      ctx.addIssue({ code: 'custom', message: `expected 1-64 letters, digits, '.', '_' or '-', got "${v}"` });
  }),
  RELAY_BATCH: int(1, 10000, 1000),
  RELAY_INTERVAL_MS: int(10, 60000, 100),
  // 0: an ingest-only replica (relays, processes nothing); another replica must process.
  CLUSTER_CONCURRENCY: int(0, 64, 4),
  // How long a frozen or partitioned replica can hold the others' locks (src/postgres/connection.ts).
  PG_IDLE_IN_TRANSACTION_TIMEOUT_MS: int(1000, 3_600_000, 10_000),
  PG_LOCK_TIMEOUT_MS: int(100, 600_000, 5_000),
  // The hold-back window's bound: a relay silent this long no longer holds processing back.
  CLUSTER_HOLDBACK_MAX_MS: int(100, 600_000, 5000),
  // Tracing (docs/operating.md "Tracing"): the SDK reads the other OTEL_* variables itself.
  OTEL_SDK_DISABLED: oneOf(['false', 'true'] as const, 'false'),
  OTEL_TRACES_EXPORTER: oneOf(['none', 'otlp'] as const, 'none'),
  OTEL_EXPORTER_OTLP_PROTOCOL: oneOf(otlpProtocols, 'http/protobuf'),
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: optionalText().transform((v, ctx) => {
    if (v === undefined) return undefined;
    const found = otlpProtocols.find((x) => x === v.toLowerCase());
    if (found === undefined)
      ctx.addIssue({ code: 'custom', message: `expected one of ${otlpProtocols.join(', ')}, got "${v}"` });
    return found;
  }),
  OTEL_SERVICE_NAME: optionalText(),
  STUCK_AFTER: optionalText().transform((v, ctx) => {
    try {
      return parseStuckAfter(v);
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: (err as Error).message });
      return z.NEVER;
    }
  }),
});

type Parsed = z.infer<typeof schema>;

export interface Config {
  readonly port: number;
  readonly host: string;
  readonly databasePath: string;
  /** Empty unless the command needs them (serve); any one that matches is accepted. */
  readonly webhookSecrets: readonly string[];
  readonly signatureHeader: string;
  readonly maxBodyBytes: number;
  readonly service: {
    readonly baseUrl: string | undefined;
    readonly accessToken: string | undefined;
    readonly tokenUrl: string | undefined;
    readonly clientId: string | undefined;
    readonly clientSecret: string | undefined;
    readonly apiKey: string | undefined;
  };
  readonly registry: {
    readonly webhookGraceMs: number;
    readonly pollIntervalMs: number;
    readonly pollMaxIntervalMs: number;
    readonly pollMaxAgeMs: number;
  };
  readonly handlerMaxAttempts: number;
  /** How long the processing lease lasts without renewal; a standby takes over within about this. */
  readonly processingLeaseMs: number;
  readonly adminToken: string | undefined;
  /**
   * VIEWER_TOKEN: signs in to `/console` read-only (contract §9); must differ from ADMIN_TOKEN.
   * @default undefined (only ADMIN_TOKEN signs in)
   */
  readonly viewerToken: string | undefined;
  /**
   * CONSOLE_SESSION_TTL: how long a console sign-in lasts, whatever the activity.
   * @default 28800000 (8h)
   */
  readonly consoleSessionTtlMs: number;
  /**
   * OIDC_*, PUBLIC_URL: operators sign in to the console with the lender's OpenID Connect provider
   * (docs/console.md, "Sign in with your identity provider"). null: the tokens sign in as before.
   * @default null
   */
  readonly oidc: OidcConfig | null;
  readonly logLevel: (typeof LOG_LEVELS)[number];
  readonly sqlite: {
    readonly synchronous: (typeof SYNCHRONOUS)[number];
    readonly busyTimeoutMs: number;
  };
  readonly groupCommitMaxBatch: number;
  readonly shutdownTimeoutMs: number;
  /**
   * MIGRATE_ON_START: `serve` migrates the SQLite file (the spool in cluster mode) and PostgreSQL
   * before it runs. false: it migrates neither, and refuses a schema that is behind, naming the
   * missing migrations and `consig-receiver migrate` (a cluster replica stays not ready and checks
   * again). @default true
   */
  readonly migrateOnStart: boolean;
  /** Raw bodies of finished events older than this are removed (row and dedup key stay); undefined keeps all. */
  readonly retentionDays: number | undefined;
  /** Who may POST to the webhook routes; undefined allows everyone (the signature still decides). */
  readonly allowedCidrs: IpAllowList | undefined;
  /** Proxies in front of the receiver whose X-Forwarded-For is believed. */
  readonly trustProxy: number;
  /**
   * No delivery for this long while proposals are in flight raises the silence alarm (the callback
   * may be deactivated, interface §6.1); 0 disables it.
   * @default 3600000
   */
  readonly deliverySilenceAlarmMs: number;
  /** Forwarding (contract §8). */
  readonly forwarding: {
    /** `FORWARD_URL`'s destination (named `default`) first, then `DESTINATIONS_FILE`'s. */
    readonly destinations: readonly Destination[];
    /** The change feed shows `nu_cpf` in full. @default false (masked, LGPD) */
    readonly feedFullCpf: boolean;
    /**
     * The change feed is served, and every `proposal.changed` / `averbacao.result` is stored for
     * it. @default false (only messages a destination wants are stored)
     */
    readonly feedEnabled: boolean;
  };
  /**
   * Age limit per non-final status after which a proposal that has not changed is stuck (metric
   * `consig_proposals_stuck`, `proposals --stuck`); `STUCK_AFTER` overrides single statuses.
   * @default em_analise=1d, pre_aprovada=3d, aprovada=3d, averbacao_solicitada=2d, averbada=3d,
   * formalizacao_iniciada=7d, formalizada=3d, efetivada=3d, pagamento_falhou=2d (DEFAULT_STUCK_AFTER)
   */
  readonly stuckAfter: StuckLimits;
  /**
   * Cluster mode (contract §10): set by `DATABASE_URL`; null runs on SQLite alone.
   * @default null
   */
  readonly cluster: ClusterConfig | null;
  /**
   * Tracing: OTEL_TRACES_EXPORTER=otlp exports spans over OTLP/HTTP (docs/operating.md "Tracing");
   * null when it is unset or `none`, or OTEL_SDK_DISABLED=true.
   * @default null
   */
  readonly tracing: TracingConfig | null;
  /** Settings that were given but have no effect, each as one line for the startup log. */
  readonly warnings: readonly string[];
}

/** The console's OpenID Connect sign-in (contract §9). */
export interface OidcConfig {
  /** OIDC_ISSUER: the provider's issuer; its discovery document is `/.well-known/openid-configuration`. */
  readonly issuer: string;
  /** OIDC_CLIENT_ID. */
  readonly clientId: string;
  /**
   * OIDC_CLIENT_SECRET: never logged. It does not key the pending sign-in's cookie (a random key in
   * the log does: `console_keys`), so its strength is the provider's business, not the cookie's.
   */
  readonly clientSecret: string;
  /** PUBLIC_URL without a trailing `/`: the redirect URI is this + `/console/oidc/callback`. */
  readonly publicUrl: string;
  /** OIDC_SCOPES. @default ['openid', 'email', 'profile'] */
  readonly scopes: readonly string[];
  /** OIDC_GROUPS_CLAIM: the ID token's claim holding the person's groups. @default 'groups' */
  readonly groupsClaim: string;
  /** OIDC_ADMIN_GROUPS / OIDC_VIEWER_GROUPS: values of that claim (admin wins where both match). */
  readonly adminGroups: readonly string[];
  readonly viewerGroups: readonly string[];
  /**
   * OIDC_SESSION_TTL: how long a session opened through the provider lasts (CONSOLE_SESSION_TTL
   * when shorter). The person's groups are read at sign-in only, so this is the longest a person
   * removed from a group at the provider keeps its role. @default 3600000 (1h)
   */
  readonly sessionTtlMs: number;
  /**
   * CONSOLE_BREAK_GLASS: ADMIN_TOKEN and VIEWER_TOKEN still sign in to the console (audited as
   * break-glass, logged at warn). @default false (the tokens serve `/admin/*` only)
   */
  readonly breakGlass: boolean;
}

/** Tracing's settings; the SDK reads the other OTEL_* variables from the environment itself. */
export interface TracingConfig {
  /**
   * OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL.
   * @default 'http/protobuf'
   */
  readonly protocol: (typeof otlpProtocols)[number];
  /** OTEL_SERVICE_NAME. @default 'consig-receiver' */
  readonly serviceName: string;
}

/** Cluster mode's settings (contract §10, docs/cluster.md). */
export interface ClusterConfig {
  /** DATABASE_URL: the shared PostgreSQL. Holds a password: never logged. */
  readonly databaseUrl: string;
  /**
   * REPLICA_ID: this replica's name in `deliveries.replica` and `events.first_replica`; unique
   * among the replicas. @default the host name
   */
  readonly replicaId: string;
  /** RELAY_BATCH: spooled deliveries moved to PostgreSQL per transaction. @default 1000 */
  readonly relayBatch: number;
  /** RELAY_INTERVAL_MS: the relay's pause when the spool is empty (a new delivery wakes it). @default 100 */
  readonly relayIntervalMs: number;
  /**
   * CLUSTER_CONCURRENCY: work keys this replica processes at once on PostgreSQL; 0 makes it
   * ingest-only (it acknowledges and relays, runs no turn or registry-poll workers and sends no
   * destination). @default 4
   */
  readonly concurrency: number;
  /**
   * PG_IDLE_IN_TRANSACTION_TIMEOUT_MS (default 10000) and PG_LOCK_TIMEOUT_MS (default 5000): the
   * bounds every connection to PostgreSQL carries (src/postgres/connection.ts).
   */
  readonly limits: { readonly idleInTransactionMs: number; readonly lockTimeoutMs: number };
  /**
   * CLUSTER_HOLDBACK_MAX_MS: a proposal's events are processed once every replica's relay has moved
   * past them (docs/cluster.md §10); a relay silent this long (a dead, frozen or cut-off replica)
   * stops holding processing back, and what it relays later is processed late. @default 5000
   */
  readonly holdbackMaxMs: number;
}

export interface LoadOptions {
  /** `serve` needs the webhook secrets; read-only commands do not. */
  requireSecrets?: boolean;
  /** Reads `DESTINATIONS_FILE`. @default fs.readFileSync as UTF-8 */
  readFile?: (path: string) => string;
}

/** The destinations of `FORWARD_URL` and `DESTINATIONS_FILE`; an unreadable file is a ConfigError. */
function destinations(p: Parsed, options: LoadOptions): Destination[] {
  const read = options.readFile ?? ((path: string) => readFileSync(path, 'utf8'));
  let text: string | null = null;
  if (p.DESTINATIONS_FILE !== undefined) {
    try {
      text = read(p.DESTINATIONS_FILE);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
      throw new ConfigError('DESTINATIONS_FILE', `cannot read ${p.DESTINATIONS_FILE} (${code})`);
    }
  }
  const env = { FORWARD_URL: p.FORWARD_URL, FORWARD_SECRET: p.FORWARD_SECRET };
  return resolveDestinations(env, text, `DESTINATIONS_FILE ${p.DESTINATIONS_FILE ?? ''}`);
}

function splitSecrets(value: string | undefined): string[] {
  if (value === undefined) return [];
  return value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

/** The variable the webhook secrets came from: WEBHOOK_SECRET is the older, single-secret name. */
function secretsVariable(p: Parsed): 'WEBHOOK_SECRETS' | 'WEBHOOK_SECRET' {
  return p.WEBHOOK_SECRETS === undefined && p.WEBHOOK_SECRET !== undefined
    ? 'WEBHOOK_SECRET'
    : 'WEBHOOK_SECRETS';
}

function check(p: Parsed, options: LoadOptions): string[] {
  const secrets = splitSecrets(p.WEBHOOK_SECRETS ?? p.WEBHOOK_SECRET);
  if (options.requireSecrets && secrets.length === 0) {
    throw new ConfigError(
      secretsVariable(p),
      'required: the shared secret(s) given to the service at webhook registration, comma-separated',
    );
  }
  const oauth = {
    SERVICE_TOKEN_URL: p.SERVICE_TOKEN_URL,
    SERVICE_CLIENT_ID: p.SERVICE_CLIENT_ID,
    SERVICE_CLIENT_SECRET: p.SERVICE_CLIENT_SECRET,
  };
  const given = Object.entries(oauth).filter(([, v]) => v !== undefined);
  if (given.length > 0 && given.length < 3) {
    const missing = Object.entries(oauth).find(([, v]) => v === undefined)?.[0] ?? 'SERVICE_TOKEN_URL';
    throw new ConfigError(
      missing,
      'required when any of SERVICE_TOKEN_URL, SERVICE_CLIENT_ID, SERVICE_CLIENT_SECRET is set',
    );
  }
  if (p.VIEWER_TOKEN !== undefined && p.VIEWER_TOKEN === p.ADMIN_TOKEN) {
    throw new ConfigError(
      'VIEWER_TOKEN',
      'must differ from ADMIN_TOKEN (the viewer token signs in read-only)',
    );
  }
  checkOidc(p);
  if (p.REGISTRY_POLL_MAX_INTERVAL_MS < p.REGISTRY_POLL_INTERVAL_MS) {
    throw new ConfigError(
      'REGISTRY_POLL_MAX_INTERVAL_MS',
      `must be at least REGISTRY_POLL_INTERVAL_MS (${p.REGISTRY_POLL_INTERVAL_MS})`,
    );
  }
  return secrets;
}

/** The OIDC variables that, given, turn the provider's sign-in on (PUBLIC_URL alone does not). */
const oidcTriggers = ['OIDC_ISSUER', 'OIDC_CLIENT_ID', 'OIDC_CLIENT_SECRET'] as const;

/** A half-given OIDC set stops startup naming the first missing variable. */
function checkOidc(p: Parsed): void {
  const given = oidcTriggers.filter((name) => p[name] !== undefined);
  const groups = p.OIDC_ADMIN_GROUPS.length + p.OIDC_VIEWER_GROUPS.length > 0;
  if (given.length === 0 && !groups) return;
  const why = "required for the console's OpenID Connect sign-in";
  for (const name of [...oidcTriggers, 'PUBLIC_URL'] as const) {
    if (p[name] === undefined)
      throw new ConfigError(
        name,
        `${why} (set with ${given[0] ?? 'OIDC_ADMIN_GROUPS/OIDC_VIEWER_GROUPS'}): ${oidcWhat[name]}`,
      );
  }
  if (!groups)
    throw new ConfigError(
      'OIDC_ADMIN_GROUPS',
      `${why}: comma-separated values of the ${p.OIDC_GROUPS_CLAIM} claim that sign in as admin (or OIDC_VIEWER_GROUPS, read only)`,
    );
}

const oidcWhat = {
  OIDC_ISSUER: "the provider's issuer URL",
  OIDC_CLIENT_ID: "the client id the provider gave the console's registration",
  OIDC_CLIENT_SECRET: "that registration's client secret",
  PUBLIC_URL: "the receiver's external base URL (the redirect URI is PUBLIC_URL/console/oidc/callback)",
} as const;

function oidcConfig(p: Parsed): OidcConfig | null {
  if (p.OIDC_ISSUER === undefined || p.OIDC_CLIENT_ID === undefined) return null;
  return Object.freeze({
    issuer: p.OIDC_ISSUER,
    clientId: p.OIDC_CLIENT_ID,
    clientSecret: p.OIDC_CLIENT_SECRET as string,
    publicUrl: (p.PUBLIC_URL as string).replace(/\/+$/, ''),
    scopes: Object.freeze(p.OIDC_SCOPES),
    groupsClaim: p.OIDC_GROUPS_CLAIM,
    adminGroups: Object.freeze(p.OIDC_ADMIN_GROUPS),
    viewerGroups: Object.freeze(p.OIDC_VIEWER_GROUPS),
    sessionTtlMs: p.OIDC_SESSION_TTL,
    breakGlass: p.CONSOLE_BREAK_GLASS === 'true',
  });
}

/**
 * QUEUE_CONCURRENCY was a p-queue concurrency for the pipeline, but handlers are synchronous SQLite
 * transactions run one turn at a time on one connection, so it never changed anything. It is still
 * accepted, so that deployments that set it keep starting, and named in the log as ignored.
 */
function ignoredSettings(p: Parsed): string[] {
  const out: string[] = [];
  if (p.QUEUE_CONCURRENCY !== undefined)
    out.push(
      'QUEUE_CONCURRENCY is ignored: the pipeline runs one turn at a time (synchronous SQLite transactions; events of one proposal in order, proposals interleaved)',
    );
  if (p.CONSOLE_BREAK_GLASS === 'true' && p.OIDC_ISSUER === undefined)
    out.push(
      'CONSOLE_BREAK_GLASS is ignored: OIDC_ISSUER is not set, so ADMIN_TOKEN and VIEWER_TOKEN sign in to the console as usual',
    );
  return out;
}

/**
 * Webhook secrets shorter than {@link MIN_TOKEN_CHARS}: anyone holding one signed delivery (a proxy's
 * log, a captured request) can search a short HMAC key offline, then sign deliveries of their own.
 * A warning, not a refusal: the secret is registered with the service, and a receiver that refused
 * to start after an upgrade would fail every delivery until the callback is deactivated (interface
 * §6.1). Rotate to a long one with WEBHOOK_SECRETS="new,old" (docs/operating.md).
 */
function weakSecrets(p: Parsed, secrets: readonly string[]): string[] {
  const name = secretsVariable(p);
  return secrets.flatMap((secret, i) =>
    secret.length >= MIN_TOKEN_CHARS
      ? []
      : [
          `${name}: secret ${i + 1} of ${secrets.length} has ${secret.length} characters, fewer than ${MIN_TOKEN_CHARS}: a short HMAC key can be found offline from one signed delivery; rotate to a long random one (e.g. openssl rand -hex 32)`,
        ],
  );
}

/**
 * Forwarding secrets whose HMAC key has fewer than {@link MIN_TOKEN_CHARS} bytes: a lender's system
 * that trusts our signature would take a message signed with a key found offline from one forwarded
 * request. A warning for the same reason as {@link weakSecrets}: a refusal would stop the receiver
 * itself. Standard Webhooks asks for 24 to 64 bytes (`whsec_` + base64 of `openssl rand 32`).
 */
function weakSigningKeys(p: Parsed, list: readonly Destination[]): string[] {
  return list.flatMap((d) =>
    d.secrets.flatMap((secret, i) => {
      const bytes = keyBytes(secret);
      if (bytes === null || bytes >= MIN_TOKEN_CHARS) return [];
      const from =
        d.name === 'default' && p.FORWARD_SECRET !== undefined ? 'FORWARD_SECRET' : 'DESTINATIONS_FILE';
      return [
        `${from}: destination "${d.name}": secret ${i + 1} of ${d.secrets.length} is a key of ${bytes} bytes, fewer than ${MIN_TOKEN_CHARS}: a short key can be found offline from one forwarded message; rotate to a long random one (e.g. whsec_ and openssl rand -base64 32)`,
      ];
    }),
  );
}

/** What startup logs at warn: settings ignored, and secrets too short to be safe. */
function warningsOf(p: Parsed, secrets: readonly string[], forwardTo: readonly Destination[]): string[] {
  return [
    ...ignoredSettings(p),
    ...weakSecrets(p, secrets),
    ...weakSigningKeys(p, forwardTo),
    ...keptForever(p),
  ];
}

/**
 * Without RETENTION_DAYS nothing personal is ever removed on its own (issue 45): the operator is told,
 * not overruled, since only the lender knows how long its obligations keep the data (docs/privacy.md).
 */
function keptForever(p: Parsed): string[] {
  if (p.RETENTION_DAYS !== undefined) return [];
  return [
    'RETENTION_DAYS is not set: the bodies of finished events, delivered messages and the CPF, employer and CNPJ of final proposals are kept for good; set it to the days your obligations require (docs/privacy.md)',
  ];
}

/** The key's length, or null for a secret that cannot sign (each send says so, in its attempt). */
function keyBytes(secret: string): number | null {
  try {
    return secretKey(secret).length;
  } catch {
    return null;
  }
}

/** OTEL_TRACES_EXPORTER=otlp (and the SDK not disabled): tracing's settings; null otherwise. */
function tracingConfig(p: Parsed): TracingConfig | null {
  if (p.OTEL_TRACES_EXPORTER !== 'otlp' || p.OTEL_SDK_DISABLED === 'true') return null;
  return Object.freeze({
    protocol: p.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? p.OTEL_EXPORTER_OTLP_PROTOCOL,
    serviceName: p.OTEL_SERVICE_NAME ?? 'consig-receiver',
  });
}

/** Reads contract §3's variables from `env`. Throws ConfigError naming the first bad one. */
/** The variables, each checked; ConfigError naming the first that is not valid. */
function parseEnv(env: NodeJS.ProcessEnv | Record<string, string | undefined>): z.infer<typeof schema> {
  const input: Record<string, string | undefined> = {};
  for (const key of Object.keys(schema.shape)) input[key] = env[key];
  const result = schema.safeParse(input);
  if (!result.success) {
    const issue = result.error.issues[0];
    const variable = String(issue?.path[0] ?? 'environment');
    throw new ConfigError(variable, issue?.message ?? 'invalid');
  }
  return result.data;
}

export function loadConfig(
  env: NodeJS.ProcessEnv | Record<string, string | undefined>,
  options: LoadOptions = {},
): Config {
  const p = parseEnv(env);
  const secrets = check(p, options);
  const forwardTo = destinations(p, options);
  const config: Config = {
    port: p.PORT,
    host: p.HOST,
    databasePath: p.DATABASE_PATH,
    webhookSecrets: Object.freeze(secrets),
    signatureHeader: p.SIGNATURE_HEADER,
    maxBodyBytes: p.MAX_BODY_BYTES,
    service: Object.freeze({
      baseUrl: p.SERVICE_BASE_URL,
      accessToken: p.SERVICE_ACCESS_TOKEN,
      tokenUrl: p.SERVICE_TOKEN_URL,
      clientId: p.SERVICE_CLIENT_ID,
      clientSecret: p.SERVICE_CLIENT_SECRET,
      apiKey: p.SERVICE_API_KEY,
    }),
    registry: Object.freeze({
      webhookGraceMs: p.REGISTRY_WEBHOOK_GRACE_MS,
      pollIntervalMs: p.REGISTRY_POLL_INTERVAL_MS,
      pollMaxIntervalMs: p.REGISTRY_POLL_MAX_INTERVAL_MS,
      pollMaxAgeMs: p.REGISTRY_POLL_MAX_AGE_MS,
    }),
    handlerMaxAttempts: p.HANDLER_MAX_ATTEMPTS,
    processingLeaseMs: p.PROCESSING_LEASE_MS,
    adminToken: p.ADMIN_TOKEN,
    viewerToken: p.VIEWER_TOKEN,
    consoleSessionTtlMs: p.CONSOLE_SESSION_TTL,
    oidc: oidcConfig(p),
    logLevel: p.LOG_LEVEL,
    sqlite: Object.freeze({ synchronous: p.SQLITE_SYNCHRONOUS, busyTimeoutMs: p.SQLITE_BUSY_TIMEOUT_MS }),
    groupCommitMaxBatch: p.GROUP_COMMIT_MAX_BATCH,
    shutdownTimeoutMs: p.SHUTDOWN_TIMEOUT_MS,
    migrateOnStart: p.MIGRATE_ON_START === 'true',
    retentionDays: p.RETENTION_DAYS === undefined ? undefined : Number(p.RETENTION_DAYS),
    allowedCidrs: p.ALLOWED_CIDRS === undefined ? undefined : parseAllowList(p.ALLOWED_CIDRS),
    trustProxy: p.TRUST_PROXY,
    deliverySilenceAlarmMs: p.DELIVERY_SILENCE_ALARM_MS,
    forwarding: Object.freeze({
      destinations: Object.freeze(forwardTo),
      feedFullCpf: p.FEED_FULL_CPF === 'true',
      feedEnabled: p.FEED_ENABLED === 'true',
    }),
    stuckAfter: p.STUCK_AFTER,
    cluster:
      p.DATABASE_URL === undefined
        ? null
        : Object.freeze({
            databaseUrl: p.DATABASE_URL,
            replicaId:
              p.REPLICA_ID ??
              hostname()
                .slice(0, 64)
                .replace(/[^A-Za-z0-9._-]/g, '-'),
            relayBatch: p.RELAY_BATCH,
            relayIntervalMs: p.RELAY_INTERVAL_MS,
            concurrency: p.CLUSTER_CONCURRENCY,
            limits: Object.freeze({
              idleInTransactionMs: p.PG_IDLE_IN_TRANSACTION_TIMEOUT_MS,
              lockTimeoutMs: p.PG_LOCK_TIMEOUT_MS,
            }),
            holdbackMaxMs: p.CLUSTER_HOLDBACK_MAX_MS,
          }),
    tracing: tracingConfig(p),
    warnings: Object.freeze(warningsOf(p, secrets, forwardTo)),
  };
  return Object.freeze(config);
}
