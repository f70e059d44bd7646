import type { Request } from 'express';
import { parseNuProposta } from '../../domain/log-rows';
import { HttpError } from '../errors';

/** The query parameter `name` given once; undefined when absent or empty (an empty filter filters nothing). */
export function textParam(req: Request, name: string): string | undefined {
  const value = req.query[name];
  if (value === undefined || value === '') return undefined;
  if (typeof value !== 'string') throw new HttpError(400, 'bad_request', `${name} may be given only once`);
  return value;
}

/** The query parameter `name` as a non-negative integer (`limit`, `before`); undefined when absent. */
export function integerParam(req: Request, name: string): number | undefined {
  const value = textParam(req, name);
  if (value === undefined) return undefined;
  if (!/^\d{1,15}$/.test(value))
    throw new HttpError(400, 'bad_request', `${name} must be a non-negative integer`);
  return Number(value);
}

/** `nu_proposta` from the query: an integer when it is one, else the text (see parseNuProposta). */
export function nuPropostaParam(req: Request): number | string | undefined {
  const value = textParam(req, 'nu_proposta');
  return value === undefined ? undefined : parseNuProposta(value);
}
