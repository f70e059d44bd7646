import { passwordOf } from './oidc-provider';

/**
 * A sign-in through the identity provider driven over HTTP with fetch, step by step, so that a test
 * can stop at any step and replay, forge or reorder one: the console's start, the provider's login
 * form, and the provider's answer to the callback. Cookies are kept per host, as a browser would.
 */

export class CookieJar {
  private readonly byHost = new Map<string, Map<string, string>>();

  take(url: string, res: Response): void {
    const host = new URL(url).host;
    const jar = this.byHost.get(host) ?? new Map<string, string>();
    this.byHost.set(host, jar);
    for (const line of res.headers.getSetCookie()) {
      const [pair = '', ...attrs] = line.split(';');
      const eq = pair.indexOf('=');
      const name = pair.slice(0, eq).trim();
      const value = pair.slice(eq + 1).trim();
      const gone = attrs.some((a) => /^\s*max-age=0$/i.test(a)) || value === '';
      if (gone) jar.delete(name);
      else jar.set(name, value);
    }
  }

  header(url: string): string {
    const jar = this.byHost.get(new URL(url).host);
    return jar === undefined ? '' : [...jar].map(([k, v]) => `${k}=${v}`).join('; ');
  }

  get(url: string, name: string): string | undefined {
    return this.byHost.get(new URL(url).host)?.get(name);
  }

  set(url: string, name: string, value: string): void {
    const host = new URL(url).host;
    const jar = this.byHost.get(host) ?? new Map<string, string>();
    this.byHost.set(host, jar);
    jar.set(name, value);
  }
}

/** One request without following redirects, its cookies kept in `jar`. */
export async function step(
  jar: CookieJar,
  url: string,
  init: { method?: string; body?: string; cookie?: string } = {},
): Promise<{ status: number; location: string | undefined; text: string; res: Response }> {
  const headers: Record<string, string> = { cookie: init.cookie ?? jar.header(url) };
  if (init.body !== undefined) headers['content-type'] = 'application/x-www-form-urlencoded';
  const res = await fetch(url, {
    method: init.method ?? 'GET',
    headers,
    body: init.body,
    redirect: 'manual',
  });
  jar.take(url, res);
  const location = res.headers.get('location') ?? undefined;
  return {
    status: res.status,
    location: location && new URL(location, url).href,
    text: await res.text(),
    res,
  };
}

/**
 * From the console's start to the provider's answer: signs `login` in at the provider and returns
 * the callback URL it sends the browser to (not yet followed), the jar holding the pending cookie.
 * `publicUrl` (default `consoleUrl`): where the provider sends the browser back — PUBLIC_URL, an
 * https address a TLS proxy would pass on to `consoleUrl`; the URL returned is then `consoleUrl`'s.
 */
export async function toCallback(
  consoleUrl: string,
  login: string,
  jar = new CookieJar(),
  publicUrl = consoleUrl,
): Promise<string> {
  const started = await step(jar, `${consoleUrl}/console/oidc/start`);
  if (started.status !== 303 || started.location === undefined)
    throw new Error(`start answered ${started.status}: ${started.text.slice(0, 300)}`);
  let at = started.location;
  for (let hops = 0; hops < 10; hops++) {
    if (at.startsWith(publicUrl)) return `${consoleUrl}${at.slice(publicUrl.length)}`;
    const r = await step(jar, at);
    if (r.status === 200 && r.text.includes('name="login"')) {
      const posted = await step(
        jar,
        new URL(at).href.replace(/\/interaction\/([^/?]+).*$/, '/interaction/$1/login'),
        {
          method: 'POST',
          body: new URLSearchParams({ login, password: passwordOf(login) }).toString(),
        },
      );
      if (posted.location === undefined) throw new Error(`login answered ${posted.status}: ${posted.text}`);
      at = posted.location;
      continue;
    }
    if (r.location === undefined) throw new Error(`${at} answered ${r.status}: ${r.text.slice(0, 300)}`);
    at = r.location;
  }
  throw new Error('the provider never sent the browser back');
}
