import { parseJsonOrUndefined } from '../domain/json';
import { EXPORT_STATEMENT } from '../domain/subject';
import type { SubjectHoldings } from './subject-find';
import { readBody } from './subject-index';

/**
 * The document `subject export` writes (issue 45; its format in docs/privacy.md "Export"): the
 * statement of art. 19 (origin, purpose, criteria, legal basis, retention), then everything each
 * place holds about the person, bodies parsed where they are JSON, and the ledger of sharing.
 */

export const EXPORT_FORMAT = 'consig-receiver/subject-export@1';

export interface ExportPlace {
  place: string;
  holdings: SubjectHoldings;
}

export function subjectExport(cpf: string, places: readonly ExportPlace[], generatedAt: string) {
  return {
    format: EXPORT_FORMAT,
    generated_at: generatedAt,
    subject: { cpf },
    ...EXPORT_STATEMENT,
    places: places.map(({ place, holdings: h }) => ({
      place,
      proposals: h.proposals,
      events: h.events.map(({ body, ...e }) => ({ ...e, body: bodyValue(body) })),
      averbacoes: h.averbacoes.map(({ result_body, ...a }) => ({
        ...a,
        result_body: bodyValue(result_body),
      })),
      messages: h.messages.map(({ body, ...m }) => ({ ...m, body: bodyValue(body) })),
      deliveries: h.deliveries,
      sharing: h.sharing,
      erasures: h.erasures,
      notices: h.notices,
    })),
  };
}

/** A stored body as the export shows it: its JSON value, else its text; null once pruned. */
function bodyValue(body: string | Buffer | null): unknown {
  if (body === null) return null;
  const { text } = readBody(body);
  return parseJsonOrUndefined(text) ?? text;
}
