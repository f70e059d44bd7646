/**
 * Sample data for the parts of the interface whose bodies are "not shown" (interface §4.6, §4.7): small,
 * fixed, realistic-looking pages, so that clients can exercise paging and parsing.
 */

export interface Page {
  total: number;
  pageStart: number;
  pageSize: number;
  totalPages: number;
  _embedded: Record<string, unknown[]>;
  _links: { self: { href: string }; next?: { href: string } };
}

const LENDERS = ['Banco Aurora', 'Caixa Serra Azul', 'Banco Ipê', 'Cooperativa Vale Verde', 'Banco Litoral'];

/** 25 fixed offers of the marketplace (interface §4.7). */
export const OFFERS: readonly Record<string, unknown>[] = Array.from({ length: 25 }, (_, i) => {
  const n = i + 1;
  return {
    id: `ofr-${String(n).padStart(3, '0')}`,
    no_instituicao: LENDERS[i % LENDERS.length],
    vl_maximo: 5000 * ((i % 8) + 1),
    qt_parcela_maxima: [24, 36, 48, 60, 72, 84, 96][i % 7],
    tx_juros_mensal: Math.round((1.49 + (i % 10) * 0.11) * 100) / 100,
    dt_validade: `2026-12-${String((i % 28) + 1).padStart(2, '0')}`,
    _links: { self: { href: `/offers/ofr-${String(n).padStart(3, '0')}` } },
  };
});

/**
 * One page of `items`: `pageStart` is the offset of the page's first item (the reading the
 * project's client takes too), `next` carries the following page in the query string.
 */
export function paginate(
  path: string,
  name: string,
  items: readonly unknown[],
  pageStart: number,
  pageSize: number,
): Page {
  const slice = items.slice(pageStart, pageStart + pageSize);
  const page: Page = {
    total: items.length,
    pageStart,
    pageSize,
    totalPages: Math.max(1, Math.ceil(items.length / pageSize)),
    _embedded: { [name]: slice },
    _links: { self: { href: `${path}?pageStart=${pageStart}&pageSize=${pageSize}` } },
  };
  if (pageStart + pageSize < items.length) {
    page._links.next = { href: `${path}?pageStart=${pageStart + pageSize}&pageSize=${pageSize}` };
  }
  return page;
}

/** The four portfolio reports of interface §4.6: path → name of the `_embedded` list and its items. */
export const REPORTS: Readonly<Record<string, { name: string; items: readonly Record<string, unknown>[] }>> =
  {
    '/workers/new-relationships': {
      name: 'relationships',
      items: [
        {
          nu_cpf: '52998224725',
          nu_cnpj_conveniada: '11222333000181',
          dt_admissao: '2026-10-01',
          vl_salario: 4200,
        },
        {
          nu_cpf: '16899535009',
          nu_cnpj_conveniada: '11222333000181',
          dt_admissao: '2026-10-15',
          vl_salario: 6100.5,
        },
      ],
    },
    '/contracts/relationship-ended': {
      name: 'contracts',
      items: [
        {
          nu_proposta: 100001,
          nu_cpf: '52998224725',
          dt_desligamento: '2026-11-03',
          vl_saldo_devedor: 8120.33,
        },
      ],
    },
    '/contracts/accounting-and-remuneration': {
      name: 'entries',
      items: [
        { nu_proposta: 100001, competencia: '2026-10', vl_parcela: 412.9, vl_remuneracao: 12.39 },
        { nu_proposta: 100002, competencia: '2026-10', vl_parcela: 250, vl_remuneracao: 7.5 },
      ],
    },
    '/emprestimos/consultar-repasse-pagamentos': {
      name: 'repasses',
      items: [
        {
          nu_cnpj_conveniada: '11222333000181',
          competencia: '2026-10',
          vl_repasse: 662.9,
          dt_repasse: '2026-11-05',
        },
      ],
    },
  };
