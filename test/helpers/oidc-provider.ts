import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { freePort } from '../../rigs/harness';

/**
 * A real OpenID Provider on loopback (test/helpers/oidc-provider-server.mjs: `oidc-provider` in a child
 * process), which a test can stop and start again on the same port (the provider down, then back).
 */

export const CLIENT_ID = 'consig-console';
export const CLIENT_SECRET = 'console-client-secret-0123456789abcdef';
export const ADMIN_GROUP = 'consig-admins';
export const VIEWER_GROUP = 'consig-viewers';

/** The provider's users (oidc-provider-server.mjs USERS): their login, password, and what the console shows. */
export const PEOPLE = {
  maria: { login: 'maria', name: 'Maria Souza', email: 'maria@lender.example' },
  joao: { login: 'joao', name: 'João Lima', email: 'joao@lender.example' },
  ana: { login: 'ana', name: 'Ana Costa', email: 'ana@lender.example' },
  both: { login: 'both', name: 'Bia Both', email: 'bia@lender.example' },
  nomail: { login: 'nomail', name: 'Nem Mail', email: undefined },
  /** Claims maria's address, which the provider never verified (email_verified false); a viewer. */
  mallory: { login: 'mallory', name: 'Mallory', email: 'maria@lender.example' },
} as const;

/** A user's password at the test provider: the login reversed. */
export function passwordOf(login: string): string {
  return [...login].reverse().join('');
}

export interface TestProvider {
  issuer: string;
  port: number;
  /** (Re)starts the provider on its port; resolves once it listens. */
  start(): Promise<void>;
  /** Stops it (the port then refuses connections). */
  stop(): Promise<void>;
}

/**
 * The provider's settings for one console: the receivers' public URLs give the redirect and
 * post-logout URIs to register. `running: false` leaves it stopped (the provider down at start).
 */
export async function testProvider(o: {
  publicUrls: readonly string[];
  running?: boolean;
}): Promise<TestProvider> {
  const port = await freePort();
  const settings = JSON.stringify({
    port,
    clientId: CLIENT_ID,
    clientSecret: CLIENT_SECRET,
    redirectUris: o.publicUrls.map((u) => `${u}/console/oidc/callback`),
    postLogoutRedirectUris: o.publicUrls.map((u) => `${u}/console/login`),
  });
  let child: ChildProcess | undefined;
  const provider: TestProvider = {
    issuer: `http://127.0.0.1:${port}`,
    port,
    async start() {
      if (child !== undefined) return;
      child = await spawnProvider(settings);
    },
    async stop() {
      const c = child;
      child = undefined;
      if (c === undefined || c.exitCode !== null) return;
      const exited = new Promise((r) => c.once('exit', r));
      c.kill('SIGTERM');
      await exited;
    },
  };
  if (o.running !== false) await provider.start();
  return provider;
}

function spawnProvider(settings: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [join(__dirname, 'oidc-provider-server.mjs')], {
    env: { PATH: process.env.PATH ?? '', OIDC_TEST_PROVIDER: settings },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the test provider did not start in 20 s:\n${out}`));
    }, 20_000);
    const onData = (chunk: Buffer) => {
      out += chunk.toString('utf8');
      if (out.includes('listening ')) {
        clearTimeout(timer);
        resolve(child);
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the test provider exited (${code}) before listening:\n${out}`));
    });
  });
}

/** The receiver's settings for signing in at `provider` (groups by the `groups` scope, as Okta does). */
export function oidcEnv(provider: TestProvider, publicUrl: string): Record<string, string> {
  return {
    OIDC_ISSUER: provider.issuer,
    OIDC_CLIENT_ID: CLIENT_ID,
    OIDC_CLIENT_SECRET: CLIENT_SECRET,
    PUBLIC_URL: publicUrl,
    OIDC_SCOPES: 'openid email profile groups',
    OIDC_ADMIN_GROUPS: ADMIN_GROUP,
    OIDC_VIEWER_GROUPS: VIEWER_GROUP,
  };
}
