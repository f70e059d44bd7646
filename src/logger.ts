import pino, { type DestinationStream, type Logger } from 'pino';
import { maskCpf } from './domain/privacy';
import { activeSpanIds, mergeSpanIds } from './tracing/log-ids';

export type { Logger };

/**
 * JSON logs on stdout. CPF is masked and secrets, tokens and signatures are censored under these
 * keys, as a safety net: the code never passes them in the first place.
 */
// Top-level keys only: wildcard paths cost ~25 µs per log call (measured with `npm run bench`), and
// the code logs flat objects.
const SECRET_PATHS = [
  'secret',
  'secrets',
  'token',
  'access_token',
  'client_secret',
  'authorization',
  'signature',
  'password',
  'api_key',
];
const CPF_PATHS = ['nu_cpf', 'cpf'];

/**
 * @param options.traceIds a line written inside a span carries its trace_id and span_id (tracing
 * on, src/tracing/log-ids.ts). @default false
 */
export function createLogger(
  level: string,
  destination?: DestinationStream,
  options: { traceIds?: boolean } = {},
): Logger {
  return pino(
    {
      level,
      ...(options.traceIds === true ? { mixin: activeSpanIds, mixinMergeStrategy: mergeSpanIds } : {}),
      base: { service: 'consig-receiver' },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: {
        paths: [...SECRET_PATHS, ...CPF_PATHS],
        censor: (value, path) =>
          CPF_PATHS.includes(path.join('.')) || path.at(-1)?.includes('cpf') ? maskCpf(value) : '[redacted]',
      },
    },
    destination ?? pino.destination({ dest: 1, sync: false }),
  );
}
