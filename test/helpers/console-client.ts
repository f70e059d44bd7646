/**
 * A browser-like client for `/console` over real HTTP (fetch): it keeps the session cookie, reads
 * the CSRF token from the page it was served, and never follows redirects by itself, so that tests
 * see every 303.
 */

/**
 * A page's markup with the white space between tags removed and void elements written `<x>`
 * (the templates are formatted by Prettier), and without the cells' `data-label` (the phone layout's
 * copy of each column heading: test/unit/console/html.test.ts and the browser tests check it), so
 * that tests can look for exact fragments of a table.
 */
export function squash(page: string): string {
  return page
    .replace(/ data-label="[^"]*"/g, '')
    .replace(/>\s+</g, '><')
    .replace(/\s*\/>/g, '>')
    .replace(/\s+>/g, '>')
    .replace(/\s+/g, ' ')
    .replace(/> /g, '>')
    .replace(/ </g, '<');
}

export interface ConsoleAnswer {
  status: number;
  /** The body as sent. */
  raw: string;
  /** The body through {@link squash}. */
  text: string;
  headers: Headers;
  location: string | null;
}

/** The `_csrf` value of the first POST form on a page. */
export function csrfOf(page: string): string {
  const match = /name="_csrf" value="([^"]+)"/.exec(page);
  if (!match?.[1]) throw new Error('no _csrf field on this page');
  return match[1];
}

export class ConsoleClient {
  cookie: string | null = null;

  constructor(readonly baseUrl: string) {}

  async request(
    path: string,
    init: { method?: string; form?: Record<string, string>; headers?: Record<string, string> } = {},
  ): Promise<ConsoleAnswer> {
    const headers: Record<string, string> = { ...init.headers };
    if (this.cookie !== null) headers.cookie = this.cookie;
    let body: string | undefined;
    if (init.form !== undefined) {
      headers['content-type'] = 'application/x-www-form-urlencoded';
      body = new URLSearchParams(init.form).toString();
    }
    const res = await fetch(`${this.baseUrl}${path}`, {
      method: init.method ?? (init.form === undefined ? 'GET' : 'POST'),
      headers,
      body,
      redirect: 'manual',
    });
    const setCookie = res.headers.get('set-cookie');
    const match = setCookie === null ? null : /consig_console=([^;]*)/.exec(setCookie);
    if (match) this.cookie = match[1] === '' ? null : `consig_console=${match[1]}`;
    const raw = await res.text();
    return {
      status: res.status,
      raw,
      text: squash(raw),
      headers: res.headers,
      location: res.headers.get('location'),
    };
  }

  get(path: string, headers: Record<string, string> = {}): Promise<ConsoleAnswer> {
    return this.request(path, { headers });
  }

  post(
    path: string,
    form: Record<string, string>,
    headers: Record<string, string> = {},
  ): Promise<ConsoleAnswer> {
    return this.request(path, { form, headers });
  }

  /** Signs in with `token`; throws unless the console answered 303. */
  async signIn(token: string): Promise<ConsoleAnswer> {
    const res = await this.post('/console/login', { token });
    if (res.status !== 303) throw new Error(`sign-in answered ${res.status}: ${res.text.slice(0, 200)}`);
    return res;
  }

  /** A page's CSRF token (the sign-out form of any signed-in page has one). */
  async csrf(path = '/console/audit'): Promise<string> {
    return csrfOf((await this.get(path)).text);
  }
}
