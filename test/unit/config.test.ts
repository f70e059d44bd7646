import { loadConfig } from '../../src/config';
import { ConfigError } from '../../src/domain/errors';
import { DEFAULT_STUCK_AFTER } from '../../src/domain/stuck';

const ADMIN = 'admin-token-0123456789';
const VIEWER = 'viewer-token-0123456789';

function error(env: Record<string, string>, requireSecrets = true): ConfigError {
  try {
    loadConfig(env, { requireSecrets });
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error('expected a ConfigError');
}

/** A retention set, so that the warning of its absence does not mix with the one a test looks at. */
const KEEPS = { RETENTION_DAYS: '30' };
describe('loadConfig', () => {
  it('applies contract §3 defaults', () => {
    const c = loadConfig({ WEBHOOK_SECRETS: 's1' }, { requireSecrets: true });
    expect(c).toMatchObject({
      port: 3000,
      host: '0.0.0.0',
      databasePath: './data/consig.db',
      webhookSecrets: ['s1'],
      signatureHeader: 'X-Service-Signature',
      maxBodyBytes: 262144,
      registry: {
        webhookGraceMs: 120000,
        pollIntervalMs: 30000,
        pollMaxIntervalMs: 900000,
        pollMaxAgeMs: 172800000,
      },
      handlerMaxAttempts: 8,
      adminToken: undefined,
      logLevel: 'info',
      sqlite: { synchronous: 'FULL' },
    });
    expect(Object.isFrozen(c)).toBe(true);
  });

  it('RETENTION_DAYS unset: startup is told that personal data is kept for good (issue 45)', () => {
    expect(loadConfig({}).warnings).toEqual([
      'RETENTION_DAYS is not set: the bodies of finished events, delivered messages and the CPF, employer and CNPJ of final proposals are kept for good; set it to the days your obligations require (docs/privacy.md)',
    ]);
    expect(loadConfig(KEEPS).warnings).toEqual([]);
  });

  it('QUEUE_CONCURRENCY does nothing, so it is accepted whatever its value and named as ignored', () => {
    expect(loadConfig(KEEPS).warnings).toEqual([]);
    for (const value of ['4', '0', 'many']) {
      const c = loadConfig({ ...KEEPS, QUEUE_CONCURRENCY: value });
      expect(c.warnings).toHaveLength(1);
      expect(c.warnings[0]).toMatch(/^QUEUE_CONCURRENCY is ignored: the pipeline runs one turn at a time/);
      expect(c).not.toHaveProperty('queueConcurrency');
    }
  });

  it('splits rotated secrets and accepts WEBHOOK_SECRET as the single form', () => {
    expect(loadConfig({ WEBHOOK_SECRETS: ' new , old ,' }).webhookSecrets).toEqual(['new', 'old']);
    expect(loadConfig({ WEBHOOK_SECRET: 'only' }, { requireSecrets: true }).webhookSecrets).toEqual(['only']);
  });

  it.each([
    ['WEBHOOK_SECRETS', 'change-me', [[1, 1, 9]]],
    ['WEBHOOK_SECRETS', 'a-long-secret-of-32-characters!!, Qw7Zk', [[2, 2, 5]]],
    ['WEBHOOK_SECRETS', 'Zq9,0123456789abcdef', [[1, 2, 3]]],
    ['WEBHOOK_SECRET', '0123456789abcde', [[1, 1, 15]]],
    ['WEBHOOK_SECRETS', '0123456789abcdef', []],
  ])('%s=%j: each secret under 16 characters is named in a warning, never shown', (name, value, expected) => {
    const { warnings } = loadConfig({ ...KEEPS, [name]: value }, { requireSecrets: true });
    expect(warnings).toEqual(
      expected.map(
        ([i, of, length]) =>
          `${name}: secret ${i} of ${of} has ${length} characters, fewer than 16: a short HMAC key can be found offline from one signed delivery; rotate to a long random one (e.g. openssl rand -hex 32)`,
      ),
    );
    for (const secret of value.split(',')) expect(warnings.join('\n')).not.toContain(secret.trim());
  });

  it('a forwarding secret whose key has under 16 bytes is named in a warning, never shown', () => {
    const file = JSON.stringify({
      destinations: [
        {
          name: 'crm',
          url: 'https://crm.example/hook',
          secrets: ['whsec_QUJD', `whsec_${'QUJD'.repeat(8)}`],
        },
        { name: 'dw', url: 'https://dw.example/hook', secret: 'Kp4-long-enough-16' },
      ],
    });
    const { warnings } = loadConfig(
      {
        ...KEEPS,
        FORWARD_URL: 'https://lender.example/hook',
        FORWARD_SECRET: 'Zx8q',
        DESTINATIONS_FILE: '/etc/d.json',
      },
      { readFile: () => file },
    );
    const tail = 'rotate to a long random one (e.g. whsec_ and openssl rand -base64 32)';
    expect(warnings).toEqual([
      `FORWARD_SECRET: destination "default": secret 1 of 1 is a key of 4 bytes, fewer than 16: a short key can be found offline from one forwarded message; ${tail}`,
      `DESTINATIONS_FILE: destination "crm": secret 1 of 2 is a key of 3 bytes, fewer than 16: a short key can be found offline from one forwarded message; ${tail}`,
    ]);
    expect(warnings.join('\n')).not.toMatch(/Zx8q|QUJD/);
  });

  it.each([
    ['SERVICE_BASE_URL', 'http://api.service.example', false],
    ['SERVICE_TOKEN_URL', 'http://10.0.0.7:8080/oauth/token', false],
    ['SERVICE_BASE_URL', 'http://simulator:4010', false],
    ['SERVICE_BASE_URL', 'https://api.service.example/v1?tenant=1', true],
    ['SERVICE_BASE_URL', 'http://127.0.0.1:4010', true],
    ['SERVICE_TOKEN_URL', 'http://localhost:4010/oauth/token', true],
    ['SERVICE_BASE_URL', 'http://[::1]:4010', true],
  ])(
    '%s=%s: the token travels with every call, so plain http only to a loopback host (accepted: %s)',
    (name, url, ok) => {
      const env = {
        [name]: url,
        SERVICE_CLIENT_ID: 'id',
        SERVICE_CLIENT_SECRET: 'secret',
        SERVICE_TOKEN_URL: 'https://t',
        [name]: url,
      };
      if (ok) expect(() => loadConfig(env)).not.toThrow();
      else
        expect(error(env, false).message).toBe(
          `${name}: expected an https URL (http only on a loopback host: the token travels with every call), got "${url}"`,
        );
    },
  );

  it.each([
    [{}, 'WEBHOOK_SECRETS'],
    [{ WEBHOOK_SECRETS: ' , ' }, 'WEBHOOK_SECRETS'],
    [{ WEBHOOK_SECRETS: 's', PORT: 'http' }, 'PORT'],
    [{ WEBHOOK_SECRETS: 's', PORT: '70000' }, 'PORT'],
    [{ WEBHOOK_SECRETS: 's', MAX_BODY_BYTES: '0' }, 'MAX_BODY_BYTES'],
    [{ WEBHOOK_SECRETS: 's', MAX_BODY_BYTES: '1.5' }, 'MAX_BODY_BYTES'],
    [{ WEBHOOK_SECRETS: 's', LOG_LEVEL: 'verbose' }, 'LOG_LEVEL'],
    [{ WEBHOOK_SECRETS: 's', SERVICE_BASE_URL: 'not a url' }, 'SERVICE_BASE_URL'],
    [{ WEBHOOK_SECRETS: 's', SERVICE_BASE_URL: 'ftp://x' }, 'SERVICE_BASE_URL'],
    [{ WEBHOOK_SECRETS: 's', SERVICE_CLIENT_ID: 'id' }, 'SERVICE_TOKEN_URL'],
    [
      { WEBHOOK_SECRETS: 's', SERVICE_TOKEN_URL: 'https://t', SERVICE_CLIENT_ID: 'id' },
      'SERVICE_CLIENT_SECRET',
    ],
    [{ WEBHOOK_SECRETS: 's', SIGNATURE_HEADER: 'bad header' }, 'SIGNATURE_HEADER'],
    [{ WEBHOOK_SECRETS: 's', SQLITE_SYNCHRONOUS: 'OFF' }, 'SQLITE_SYNCHRONOUS'],
    [{ WEBHOOK_SECRETS: 's', STUCK_AFTER: 'averbacao_solicitada=36x' }, 'STUCK_AFTER'],
    [{ WEBHOOK_SECRETS: 's', STUCK_AFTER: 'paga=1d' }, 'STUCK_AFTER'],
    [
      { WEBHOOK_SECRETS: 's', REGISTRY_POLL_INTERVAL_MS: '5000', REGISTRY_POLL_MAX_INTERVAL_MS: '1000' },
      'REGISTRY_POLL_MAX_INTERVAL_MS',
    ],
  ])('%j names %s', (env, variable) => {
    const err = error(env as Record<string, string>);
    expect(err.variable).toBe(variable);
    expect(err.message.startsWith(`${variable}: `)).toBe(true);
    expect(err.message).not.toContain('\n');
  });

  it('STUCK_AFTER overrides the default age limits of the statuses it names; an error names the entry', () => {
    expect(loadConfig({}).stuckAfter).toEqual(DEFAULT_STUCK_AFTER);
    const c = loadConfig({ STUCK_AFTER: 'averbacao_solicitada=36h, aprovada=off' });
    expect(c.stuckAfter).toEqual({
      ...DEFAULT_STUCK_AFTER,
      averbacao_solicitada: 36 * 3_600_000,
      aprovada: null,
    });
    expect(error({ STUCK_AFTER: 'formalizacao_iniciada=5x' }, false).message).toBe(
      'STUCK_AFTER: formalizacao_iniciada: expected a duration from 1m to 3650d such as 90m, 36h or 5d, or off, got "5x"',
    );
    expect(error({ STUCK_AFTER: 'averbacao=2d' }, false).message).toMatch(
      /^STUCK_AFTER: unknown status "averbacao" \(expected one of em_analise, /,
    );
  });

  it('VIEWER_TOKEN signs in to the console read-only and must differ from ADMIN_TOKEN; CONSOLE_SESSION_TTL is a duration', () => {
    const c = loadConfig({ ADMIN_TOKEN: ADMIN, VIEWER_TOKEN: VIEWER });
    expect(c).toMatchObject({ adminToken: ADMIN, viewerToken: VIEWER, consoleSessionTtlMs: 8 * 3_600_000 });
    expect(loadConfig({ VIEWER_TOKEN: VIEWER }).viewerToken).toBe(VIEWER);
    const same = error(
      { ADMIN_TOKEN: 'same-token-0123456789', VIEWER_TOKEN: 'same-token-0123456789' },
      false,
    );
    expect(same.variable).toBe('VIEWER_TOKEN');
    expect(same.message).not.toContain('same-token');
    expect(loadConfig({ CONSOLE_SESSION_TTL: '30m' }).consoleSessionTtlMs).toBe(30 * 60_000);
    expect(loadConfig({ CONSOLE_SESSION_TTL: '7d' }).consoleSessionTtlMs).toBe(7 * 86_400_000);
    for (const bad of ['8', '1m', '31d', 'forever', '8 h']) {
      expect(error({ CONSOLE_SESSION_TTL: bad }, false).variable).toBe('CONSOLE_SESSION_TTL');
    }
  });

  it('refuses an ADMIN_TOKEN or VIEWER_TOKEN shorter than 16 characters, naming the variable, never the value', () => {
    for (const variable of ['ADMIN_TOKEN', 'VIEWER_TOKEN']) {
      const short = error({ [variable]: 'abcdefghijklmno' }, false);
      expect(short.variable).toBe(variable);
      expect(short.message).toBe(
        `${variable}: expected at least 16 characters (a long random string, e.g. openssl rand -hex 32), got 15`,
      );
      expect(short.message).not.toContain('abcdefghijklmno');
      expect(error({ [variable]: 'a' }, false).variable).toBe(variable);
    }
    // Surrounding blanks are not characters of the token.
    expect(error({ ADMIN_TOKEN: '  abcdefghijklmno  ' }, false).variable).toBe('ADMIN_TOKEN');
    expect(loadConfig({ ADMIN_TOKEN: 'abcdefghijklmnop' }).adminToken).toBe('abcdefghijklmnop');
  });

  it('does not require secrets for read-only commands', () => {
    expect(loadConfig({}, { requireSecrets: false }).webhookSecrets).toEqual([]);
  });

  it('never echoes a secret in its errors', () => {
    const err = error({ WEBHOOK_SECRETS: 'super-secret-value', PORT: 'x' });
    expect(err.message).not.toContain('super-secret-value');
  });
});

describe('CLUSTER_CONCURRENCY', () => {
  const cluster = { DATABASE_URL: 'postgres://u:p@db:5432/consig', REPLICA_ID: 'r1' };

  it('defaults to 4 and accepts 0 (an ingest-only replica) to 64', () => {
    expect(loadConfig(cluster).cluster?.concurrency).toBe(4);
    expect(loadConfig({ ...cluster, CLUSTER_CONCURRENCY: '0' }).cluster?.concurrency).toBe(0);
    expect(loadConfig({ ...cluster, CLUSTER_CONCURRENCY: '64' }).cluster?.concurrency).toBe(64);
  });

  it('refuses values outside 0 to 64, naming the variable and the range', () => {
    for (const bad of ['-1', '65', '1.5', 'none']) {
      const err = error({ ...cluster, CLUSTER_CONCURRENCY: bad }, false);
      expect(err.variable).toBe('CLUSTER_CONCURRENCY');
      expect(err.message).toBe(`CLUSTER_CONCURRENCY: expected an integer from 0 to 64, got "${bad}"`);
    }
  });
});

describe('PG_IDLE_IN_TRANSACTION_TIMEOUT_MS and PG_LOCK_TIMEOUT_MS', () => {
  const cluster = { DATABASE_URL: 'postgres://u:p@db:5432/consig', REPLICA_ID: 'r1' };

  it('default to 10 s and 5 s, and are read in milliseconds', () => {
    expect(loadConfig(cluster).cluster?.limits).toEqual({
      idleInTransactionMs: 10_000,
      lockTimeoutMs: 5_000,
    });
    const set = { ...cluster, PG_IDLE_IN_TRANSACTION_TIMEOUT_MS: '30000', PG_LOCK_TIMEOUT_MS: '250' };
    expect(loadConfig(set).cluster?.limits).toEqual({ idleInTransactionMs: 30_000, lockTimeoutMs: 250 });
  });

  it('refuse a bound of zero (no bound) or below their minimum, naming the variable', () => {
    expect(error({ ...cluster, PG_IDLE_IN_TRANSACTION_TIMEOUT_MS: '0' }, false).variable).toBe(
      'PG_IDLE_IN_TRANSACTION_TIMEOUT_MS',
    );
    expect(error({ ...cluster, PG_LOCK_TIMEOUT_MS: '50' }, false).variable).toBe('PG_LOCK_TIMEOUT_MS');
  });
});

describe('CLUSTER_HOLDBACK_MAX_MS', () => {
  const cluster = { DATABASE_URL: 'postgres://u:p@db:5432/consig', REPLICA_ID: 'r1' };

  it('defaults to 5000 and accepts 100 to 600000', () => {
    expect(loadConfig(cluster).cluster?.holdbackMaxMs).toBe(5000);
    expect(loadConfig({ ...cluster, CLUSTER_HOLDBACK_MAX_MS: '100' }).cluster?.holdbackMaxMs).toBe(100);
    expect(loadConfig({ ...cluster, CLUSTER_HOLDBACK_MAX_MS: '600000' }).cluster?.holdbackMaxMs).toBe(600000);
  });

  it('refuses values outside 100 to 600000, naming the variable and the range', () => {
    for (const bad of ['99', '600001', 'soon']) {
      const err = error({ ...cluster, CLUSTER_HOLDBACK_MAX_MS: bad }, false);
      expect(err.variable).toBe('CLUSTER_HOLDBACK_MAX_MS');
      expect(err.message).toBe(
        `CLUSTER_HOLDBACK_MAX_MS: expected an integer from 100 to 600000, got "${bad}"`,
      );
    }
  });
});

describe('OpenID Connect sign-in (issue 34)', () => {
  const FULL = {
    OIDC_ISSUER: 'https://login.lender.example/realms/ops',
    OIDC_CLIENT_ID: 'consig-console',
    OIDC_CLIENT_SECRET: 'the-client-secret-value',
    PUBLIC_URL: 'https://receiver.lender.example/',
    OIDC_ADMIN_GROUPS: 'consig-admins, ops ',
  };

  it('is off by default, and reads the whole set with its defaults', () => {
    expect(loadConfig({}).oidc).toBeNull();
    expect(loadConfig({ PUBLIC_URL: 'https://receiver.lender.example' }).oidc).toBeNull();
    expect(loadConfig(FULL).oidc).toEqual({
      issuer: FULL.OIDC_ISSUER,
      clientId: 'consig-console',
      clientSecret: 'the-client-secret-value',
      publicUrl: 'https://receiver.lender.example',
      scopes: ['openid', 'email', 'profile'],
      groupsClaim: 'groups',
      adminGroups: ['consig-admins', 'ops'],
      viewerGroups: [],
      sessionTtlMs: 3_600_000,
      breakGlass: false,
    });
    const c = loadConfig({
      ...FULL,
      OIDC_SCOPES: 'openid  email groups',
      OIDC_GROUPS_CLAIM: 'roles',
      OIDC_VIEWER_GROUPS: 'support',
      OIDC_SESSION_TTL: '15m',
      CONSOLE_BREAK_GLASS: 'true',
    });
    expect(c.oidc).toMatchObject({
      scopes: ['openid', 'email', 'groups'],
      groupsClaim: 'roles',
      viewerGroups: ['support'],
      sessionTtlMs: 900_000,
      breakGlass: true,
    });
  });

  it.each(['4m', '31d', 'soon', '0'])('refuses OIDC_SESSION_TTL=%s (5m to 30d)', (value) => {
    expect(error({ ...FULL, OIDC_SESSION_TTL: value }, false).variable).toBe('OIDC_SESSION_TTL');
  });

  it.each([
    ['OIDC_CLIENT_ID', { OIDC_ISSUER: FULL.OIDC_ISSUER }],
    ['OIDC_CLIENT_SECRET', { OIDC_ISSUER: FULL.OIDC_ISSUER, OIDC_CLIENT_ID: 'c' }],
    ['OIDC_ISSUER', { OIDC_CLIENT_SECRET: 'x' }],
    ['OIDC_ISSUER', { OIDC_VIEWER_GROUPS: 'support' }],
    ['PUBLIC_URL', { ...FULL, PUBLIC_URL: '' }],
    ['OIDC_ADMIN_GROUPS', { ...FULL, OIDC_ADMIN_GROUPS: ' , ' }],
  ])('a half-given set names what is missing: %s', (variable, env) => {
    const err = error(env, false);
    expect(err.variable).toBe(variable);
    expect(err.message).not.toContain('the-client-secret-value');
  });

  it('refuses a plain-http issuer or public URL off loopback, a URL with a query, and scopes without openid', () => {
    for (const [variable, value] of [
      ['OIDC_ISSUER', 'http://login.lender.example'],
      ['PUBLIC_URL', 'http://receiver.lender.example'],
      ['OIDC_ISSUER', 'https://login.lender.example/?tenant=x'],
      ['PUBLIC_URL', 'ftp://receiver.lender.example'],
    ] as const) {
      expect(error({ ...FULL, [variable]: value }, false).variable).toBe(variable);
    }
    expect(error({ ...FULL, OIDC_SCOPES: 'email profile' }, false).variable).toBe('OIDC_SCOPES');
    expect(error({ ...FULL, CONSOLE_BREAK_GLASS: 'yes' }, false).variable).toBe('CONSOLE_BREAK_GLASS');
    for (const host of ['127.0.0.1:8080', 'localhost:3000', '[::1]:9000'])
      expect(
        loadConfig({ ...FULL, OIDC_ISSUER: `http://${host}`, PUBLIC_URL: `http://${host}` }).oidc,
      ).not.toBeNull();
  });

  it('names CONSOLE_BREAK_GLASS as ignored without an identity provider', () => {
    expect(loadConfig({ ...KEEPS, CONSOLE_BREAK_GLASS: 'true' }).warnings).toEqual([
      expect.stringMatching(/^CONSOLE_BREAK_GLASS is ignored: OIDC_ISSUER is not set/),
    ]);
  });
});

describe('tracing (OTEL_*)', () => {
  const base = { WEBHOOK_SECRETS: 's1' };

  it('is off unless OTEL_TRACES_EXPORTER=otlp, and off again with OTEL_SDK_DISABLED=true', () => {
    expect(loadConfig(base).tracing).toBeNull();
    expect(loadConfig({ ...base, OTEL_TRACES_EXPORTER: 'none' }).tracing).toBeNull();
    expect(
      loadConfig({ ...base, OTEL_TRACES_EXPORTER: 'otlp', OTEL_SDK_DISABLED: 'true' }).tracing,
    ).toBeNull();
  });

  it.each([
    [{}, 'http/protobuf', 'consig-receiver'],
    [{ OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }, 'http/json', 'consig-receiver'],
    // The traces-only variable wins over the general one.
    [
      { OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf' },
      'http/protobuf',
      'consig-receiver',
    ],
    [{ OTEL_SERVICE_NAME: 'lender-receiver' }, 'http/protobuf', 'lender-receiver'],
  ])('with %j: protocol %s, service name %s', (env, protocol, serviceName) => {
    expect(loadConfig({ ...base, OTEL_TRACES_EXPORTER: 'otlp', ...env }).tracing).toEqual({
      protocol,
      serviceName,
    });
  });

  it.each([
    ['OTEL_TRACES_EXPORTER', 'jaeger', 'expected one of none, otlp'],
    ['OTEL_EXPORTER_OTLP_PROTOCOL', 'grpc', 'expected one of http/protobuf, http/json'],
    ['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'grpc', 'expected one of http/protobuf, http/json'],
    ['OTEL_SDK_DISABLED', 'yes', 'expected one of false, true'],
  ])('refuses %s=%s, naming the variable', (variable, value, message) => {
    const err = error({ ...base, OTEL_TRACES_EXPORTER: 'otlp', [variable]: value });
    expect(err.variable).toBe(variable);
    expect(err.message).toContain(message);
  });
});
