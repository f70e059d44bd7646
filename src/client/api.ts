import { isObject, type JsonObject } from '../domain/json';
import { type CallContext, ProtocolError } from './errors';
import type { ServiceResponse, Transport } from './transport';
import { type Query, urlUnder } from './urls';

/**
 * The service's API as the endpoint functions see it: paths under `{base_url}` sent through the
 * transport, and answers that know how to complain about their own shape.
 */

/** A 2xx answer, and the call it answers (for the ProtocolError when its shape is wrong). */
export class Answer {
  constructor(
    readonly response: ServiceResponse,
    readonly context: CallContext,
  ) {}

  /** A ProtocolError about this answer. */
  unexpected(problem: string): ProtocolError {
    return new ProtocolError(this.context, problem);
  }

  /** The body, when it is a JSON object. */
  object(): JsonObject {
    if (!isObject(this.response.body)) throw this.unexpected('expected a JSON object');
    return this.response.body;
  }

  /** The body, when it is JSON of any shape. */
  json(): unknown {
    if (this.response.body === undefined) throw this.unexpected('expected JSON');
    return this.response.body;
  }
}

/** A number, or a numeric string (some services quote numbers), when finite; otherwise null. */
export function finiteNumber(value: unknown): number | null {
  const n = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
  return typeof n === 'number' && Number.isFinite(n) ? n : null;
}

/** Where an endpoint's call goes besides its path: the query, and the deprecation warning's key. */
interface Target {
  /**
   * The path as the interface writes it (`/request/:requestId`), keying the once-per-path
   * deprecation warning; needed when the path carries an id or the target is a URL.
   * @default the path given
   */
  route?: string;
  query?: Query;
}

export interface PostOptions extends Omit<Target, 'query'> {
  /** Safe to send twice (see `CallSpec.idempotent`): every POST says so, one way or the other. */
  idempotent: boolean;
  /** Send the bearer token and `x-api-key`. @default true */
  auth?: boolean;
}

export class ServiceApi {
  constructor(
    /** `{base_url}`; a path prefix in it is kept. */
    private readonly base: URL,
    private readonly transport: Transport,
  ) {}

  /** `path` (already encoded) under `{base_url}`. */
  url(path: string, query?: Query): URL {
    return urlUnder(this.base, path, query);
  }

  /** An authenticated GET; reading is always safe to repeat. */
  get(path: string, target: Target = {}): Promise<Answer> {
    return this.send('GET', path, { ...target, auth: true, idempotent: true });
  }

  /** A POST of `body` as JSON to a path under `{base_url}`, or to a URL built from one (a next-page link). */
  post(path: string | URL, body: unknown, options: PostOptions): Promise<Answer> {
    return this.send('POST', path, { auth: true, ...options, body });
  }

  private async send(
    method: 'GET' | 'POST',
    path: string | URL,
    spec: Target & { body?: unknown; auth: boolean; idempotent: boolean },
  ): Promise<Answer> {
    const url = typeof path === 'string' ? this.url(path, spec.query) : path;
    const route = spec.route ?? (typeof path === 'string' ? path : url.pathname);
    const response = await this.transport.call({
      method,
      url,
      route: `${method} ${route}`,
      body: spec.body,
      auth: spec.auth,
      idempotent: spec.idempotent,
    });
    return new Answer(response, { method, path: url.pathname, status: response.status });
  }
}
