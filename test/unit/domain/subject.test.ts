import { join } from 'node:path';

import * as Subject from '../../../src/domain/subject';
import type { HandlerEvent } from '../../../src/domain/event-router';
import { loadAgainInEachTest } from './fresh-module';

// Loaded again in each test, so that Stryker runs these tests against its module-level table
// (PERSONAL_KEYS) and pattern (CPF_IN_TEXT) too (fresh-module.ts).
loadAgainInEachTest(Subject, join(__dirname, '../../../src/domain/subject'));
const {
  bodySubject,
  cpfForms,
  cpfsInText,
  ERASED,
  erasedEvent,
  eraseFromText,
  erasureId,
  EXPORT_STATEMENT,
  noticeBody,
  parseSubjectCpf,
  PERSONAL_KEYS,
  SUBJECT_KEY_NAME,
  subjectHash,
  subjectMatcher,
} = Subject;

/**
 * The people in the data (issue 45): a person's keyed hash, the CPF an operator types, the CPFs of a
 * text, whose a body is, and what is left of a body once its person is erased.
 */

/** Valid CPFs (check digits hold, none a known fake): A the subject, B someone else. */
const A = '52998224725';
const A_FORMATTED = '529.982.247-25';
const B = '11144477735';
const B_FORMATTED = '111.444.777-35';
/** A CPF with a leading zero: sent as a JSON number it has 10 digits. */
const Z = '01234567890';
const Z_NUMBER = 1234567890;

const KEY = Buffer.alloc(32, 7);
const OTHER_KEY = Buffer.alloc(32, 8);

describe('subjectHash', () => {
  it('is HMAC-SHA256 of `cpf:<digits>` under the key, in base64url (a fixed vector)', () => {
    expect(subjectHash(KEY, A)).toBe('gq5x7vPGYQhP1ljH2RC7GDreul5mliebBRBscQJKEco');
    expect(subjectHash(Buffer.from('chave'), A)).toBe('mTO6I0y3rFfv7khgCqAN6QjEHkOz-3wSSxcEtDjM1tc');
  });

  it('is stable for a key, 43 characters, and differs per key and per person', () => {
    expect(subjectHash(KEY, A)).toBe(subjectHash(Buffer.from(KEY), A));
    expect(subjectHash(KEY, A)).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(subjectHash(OTHER_KEY, A)).not.toBe(subjectHash(KEY, A));
    expect(subjectHash(KEY, B)).not.toBe(subjectHash(KEY, A));
  });

  it('matches the person of a hash only (subjectMatcher)', () => {
    const isA = subjectMatcher(KEY, subjectHash(KEY, A));
    expect([isA(A), isA(B), isA(Z)]).toEqual([true, false, false]);
    // Under another key the same hash names nobody.
    expect(subjectMatcher(OTHER_KEY, subjectHash(KEY, A))(A)).toBe(false);
  });

  it('names the key in console_keys', () => {
    expect(SUBJECT_KEY_NAME).toBe('subject-hash');
  });
});

describe('cpfForms', () => {
  it('the digits and the punctuated form, what a raw search looks for', () => {
    expect(cpfForms('52998224725')).toEqual(['52998224725', '529.982.247-25']);
  });
});

describe('parseSubjectCpf', () => {
  const DIGITS = 'expected a CPF: 11 digits, or 000.000.000-00';
  const CHECK = 'not a valid CPF (its check digits do not match)';
  it.each<[string, { cpf: string } | { error: string }]>([
    [A_FORMATTED, { cpf: A }],
    [A, { cpf: A }],
    [`  ${A_FORMATTED}\t`, { cpf: A }],
    [`\n${A}  `, { cpf: A }],
    [Z, { cpf: Z }],
    // Bad check digits: a typo must not find (or erase) someone else.
    ['529.982.247-24', { error: CHECK }],
    ['52998224715', { error: CHECK }],
    ['111.111.111-11', { error: CHECK }],
    ['12345678909', { error: CHECK }], // a well-known fake
    // Not 11 digits.
    ['5299822472', { error: DIGITS }],
    ['529982247250', { error: DIGITS }],
    ['529.982.247-2A', { error: DIGITS }],
    ['', { error: DIGITS }],
    ['   ', { error: DIGITS }],
    ['cpf', { error: DIGITS }],
  ])('%p → %p', (input, expected) => {
    expect(parseSubjectCpf(input)).toEqual(expected);
  });
});

describe('cpfsInText', () => {
  it.each<[string, string[]]>([
    [`cpf ${A}`, [A]],
    [`cpf ${A_FORMATTED}.`, [A]],
    [`{"nu_cpf":"${A}","outro":${B}}`, [A, B]],
    [`${B_FORMATTED} e ${A}`, [B, A]],
    // Only valid ones.
    ['529.982.247-24 e 52998224726', []],
    ['12345678909', []],
    // Each once, in order of first appearance, whatever form it was written in.
    [`${A} ${A_FORMATTED} ${B} ${A}`, [A, B]],
    // Inside a longer run of digits: not a CPF.
    [`9${A}`, []],
    [`${A}0`, []],
    [`conta 1${A}2`, []],
    // A formatted one touching digits is not matched either.
    [`1${A_FORMATTED}`, []],
    [`${A_FORMATTED}9`, []],
    // Letters around it are fine.
    [`cpf=${A}&x=1`, [A]],
    [`x${A}y`, [A]],
    ['', []],
    ['sem cpf', []],
  ])('%p → %p', (text, expected) => {
    expect(cpfsInText(text)).toEqual(expected);
  });

  it('finds them again on a second call (no state left in the pattern)', () => {
    expect(cpfsInText(`a ${A}`)).toEqual([A]);
    expect(cpfsInText(`a ${A}`)).toEqual([A]);
  });
});

describe('bodySubject', () => {
  it.each<[string, string, string | null]>([
    ['dados.nu_cpf as a string', JSON.stringify({ dados: { nu_cpf: A } }), A],
    ['dados.nu_cpf formatted', JSON.stringify({ dados: { nu_cpf: A_FORMATTED } }), A],
    ['dados.nu_cpf as a number', JSON.stringify({ dados: { nu_cpf: Number(A) } }), A],
    [
      'dados.nu_cpf as a number that lost its leading zero',
      JSON.stringify({ dados: { nu_cpf: Z_NUMBER } }),
      Z,
    ],
    [
      'dados.nu_cpf wins over a CPF written before it',
      JSON.stringify({ obs: `cpf ${B}`, dados: { nu_cpf: A } }),
      A,
    ],
    [
      'dados.nu_cpf invalid: the first valid CPF written in the body',
      JSON.stringify({ obs: `cpf ${B}`, dados: { nu_cpf: '52998224724' } }),
      B,
    ],
    ['a registry result: the first CPF in the text', JSON.stringify({ requestId: 'r', cpf: B, x: A }), B],
    ['nu_cpf outside dados: read as text', JSON.stringify({ nu_cpf: A }), A],
    ['not JSON (quarantined): the first CPF in the text', `garbled ${A_FORMATTED} then ${B}`, A],
    ['names nobody', JSON.stringify({ dados: { nu_proposta: 41 } }), null],
    ['an invalid CPF only', JSON.stringify({ dados: { nu_cpf: '52998224724' } }), null],
    ['dados.nu_cpf blank', JSON.stringify({ dados: { nu_cpf: '' } }), null],
    ['empty text', '', null],
  ])('%s', (_name, text, expected) => {
    expect(bodySubject(text)).toBe(expected);
  });
});

describe('PERSONAL_KEYS', () => {
  it('is the personal set of docs/privacy.md, not the legal-hold one', () => {
    expect([...PERSONAL_KEYS].sort()).toEqual(
      [
        'celular',
        'cpf',
        'dados_bancarios',
        'dt_admissao',
        'dt_demissao',
        'dt_nascimento',
        'email',
        'endereco',
        'no_cliente',
        'no_conveniada',
        'no_pessoa',
        'nome',
        'nu_cnpj_conveniada',
        'nu_cpf',
        'pix',
        'salario',
        'telefone',
        'vl_salario',
      ].sort(),
    );
    for (const kept of ['nu_proposta', 'uuid', 'st_proposta', 'vl_emprestimo', 'qt_parcela', 'requestId'])
      expect(PERSONAL_KEYS.has(kept)).toBe(false);
  });
});

describe('eraseFromText', () => {
  it('writes the documented marker, in Portuguese as the data it replaces (docs/privacy.md)', () => {
    expect(eraseFromText(JSON.stringify({ ref: A }), isA)).toBe('{"ref":"[apagado]"}');
  });

  const isA = subjectMatcher(KEY, subjectHash(KEY, A));
  const isZ = subjectMatcher(KEY, subjectHash(KEY, Z));
  const json = (value: unknown) => JSON.stringify(value);

  it.each<[string, string, string, (cpf: string) => boolean]>([
    [
      'JSON: every personal key removed, at any depth; the loan kept',
      json({
        evento: 'proposta.criada',
        dados: {
          nu_proposta: 41,
          nu_cpf: A,
          no_cliente: 'Maria',
          vl_emprestimo: 1000,
          nu_cnpj_conveniada: '12345678000195',
          no_conveniada: 'Prefeitura',
          extra: { email: 'm@x', endereco: { rua: 'R' }, st: 'ok', deep: [{ telefone: '1', keep: 2 }] },
        },
      }),
      json({
        evento: 'proposta.criada',
        dados: { nu_proposta: 41, vl_emprestimo: 1000, extra: { st: 'ok', deep: [{ keep: 2 }] } },
      }),
      isA,
    ],
    [
      "JSON: the subject's CPF in other strings replaced, another person's kept",
      json({ obs: `cliente ${A_FORMATTED}, fiador ${B}`, ref: A, other: B }),
      json({ obs: `cliente ${ERASED}, fiador ${B}`, ref: ERASED, other: B }),
      isA,
    ],
    [
      'JSON: personal keys go whoever they name (the body is the subject’s)',
      json({ dados: { nu_cpf: B, nome: 'B' }, n: 1 }),
      json({ dados: {}, n: 1 }),
      isA,
    ],
    [
      "JSON: an 11-digit number that is the subject's CPF replaced; others kept",
      json({ a: Number(A), b: Number(B), c: 123, d: 52998224725.5 }),
      json({ a: ERASED, b: Number(B), c: 123, d: 52998224725.5 }),
      isA,
    ],
    [
      'JSON: a CPF sent as a number that lost its leading zero',
      json({ ref: Z_NUMBER, other: 1234567891 }),
      json({ ref: ERASED, other: 1234567891 }),
      isZ,
    ],
    [
      'JSON: arrays, of values and of objects',
      json([A, B, { cpf: A, n: 1 }, [Number(A), 'x']]),
      json([ERASED, B, { n: 1 }, [ERASED, 'x']]),
      isA,
    ],
    ['JSON: a bare string', json(`x ${A}`), json(`x ${ERASED}`), isA],
    ['JSON: a bare number', A, json(ERASED), isA],
    ['JSON: null, booleans kept', json({ a: null, b: true }), json({ a: null, b: true }), isA],
    [
      'not JSON: only the CPFs of the subject replaced, formatted or not',
      `quarantined ${A} / ${A_FORMATTED} / ${B} / 1${A}`,
      `quarantined ${ERASED} / ${ERASED} / ${B} / 1${A}`,
      isA,
    ],
    ['not JSON: nobody of theirs in it, unchanged', `log ${B} nu_cpf`, `log ${B} nu_cpf`, isA],
    ['empty text', '', '', isA],
  ])('%s', (_name, text, expected, isSubject) => {
    expect(eraseFromText(text, isSubject)).toBe(expected);
  });

  it('asks about each CPF as its 11 digits', () => {
    const asked: string[] = [];
    eraseFromText(json({ a: A_FORMATTED, b: Z_NUMBER, c: `t ${B}` }), (cpf) => {
      asked.push(cpf);
      return false;
    });
    expect(asked).toEqual([A, Z, B]);
  });

  it('keeps the whole body of nobody when asked to erase nobody but its personal keys', () => {
    const body = json({ dados: { nu_proposta: 7, nu_cpf: A }, ids: [A] });
    expect(eraseFromText(body, () => false)).toBe(json({ dados: { nu_proposta: 7 }, ids: [A] }));
  });
});

describe('erasedEvent', () => {
  const event = (rawBody: string | null): HandlerEvent => {
    const payload = rawBody === null ? undefined : (JSON.parse(rawBody) as { dados?: unknown });
    return {
      id: 9,
      kind: 'event',
      evento: 'proposta.criada',
      nuProposta: 41,
      requestId: null,
      registryStatus: null,
      webhookId: 'wh-9',
      dedupKey: 'wh-9',
      tentativa: 1,
      receivedAt: '2026-11-21T13:00:00.000Z',
      attempts: 0,
      rawBody,
      payload,
      dados: payload?.dados,
    };
  };

  it('removes every CPF and personal key from the body, and reads it again', () => {
    const raw = JSON.stringify({
      evento: 'proposta.criada',
      dados: { uuid: 'u-41', nu_cpf: A, no_cliente: 'Maria', obs: `fiador ${B}`, ref: Number(B), st: 'x' },
    });
    const erased = erasedEvent(event(raw));
    const expectedBody = {
      evento: 'proposta.criada',
      dados: { uuid: 'u-41', obs: `fiador ${ERASED}`, ref: ERASED, st: 'x' },
    };
    expect(erased).toEqual({
      ...event(raw),
      rawBody: JSON.stringify(expectedBody),
      payload: expectedBody,
      dados: expectedBody.dados,
    });
  });

  // Bug (reported, not fixed here): erasedEvent erases with `() => true`, and eraseFromValue asks
  // about every number normalizeCpf accepts, i.e. every integer from 0 to 99 999 999 999 padded to
  // 11 digits: nu_proposta, vl_emprestimo, qt_parcela become "[apagado]" (the legal-hold set lost,
  // and what later stages read from `dados` with them).
  it('keeps the numbers that are not CPFs: ids and amounts (the legal-hold set)', () => {
    const raw = JSON.stringify({
      dados: { nu_proposta: 41, vl_emprestimo: 5000, qt_parcela: 84, nu_cpf: A },
    });
    expect(JSON.parse(erasedEvent(event(raw)).rawBody!)).toEqual({
      dados: { nu_proposta: 41, vl_emprestimo: 5000, qt_parcela: 84 },
    });
  });

  it('leaves an event without a body as it is', () => {
    const none = event(null);
    expect(erasedEvent(none)).toBe(none);
  });

  it('erases a body that is not JSON as text: no payload, no dados', () => {
    const raw = `not json ${A_FORMATTED}`;
    const erased = erasedEvent({ ...event(null), rawBody: raw });
    expect(erased.rawBody).toBe(`not json ${ERASED}`);
    expect(erased.payload).toBeUndefined();
    expect(erased.dados).toBeUndefined();
  });
});

describe('noticeBody', () => {
  it("is a Standard Webhooks message: id, type, created_at, the erasure's proposals and requests, no CPF", () => {
    const body = noticeBody({
      webhookId: 'msg_1',
      erasureId: 'era_x',
      createdAt: '2026-11-21T13:00:00.000Z',
      proposals: [41, 'ABC-9'],
      requests: ['req-1'],
    });
    expect(body).toBe(
      '{"id":"msg_1","type":"subject.erased","created_at":"2026-11-21T13:00:00.000Z",' +
        '"data":{"erasure_id":"era_x","nu_propostas":[41,"ABC-9"],"request_ids":["req-1"]}}',
    );
    expect(cpfsInText(body)).toEqual([]);
  });
});

describe('erasureId', () => {
  it.each<[Buffer, string]>([
    [Buffer.alloc(16, 0xab), 'era_q6urq6urq6urq6urq6urqw'],
    [Buffer.from([...Array(16).keys()]), 'era_AAECAwQFBgcICQoLDA0ODw'],
  ])('16 bytes → era_ and 22 base64url characters', (random, expected) => {
    expect(erasureId(random)).toBe(expected);
    expect(erasureId(random)).toMatch(/^era_[A-Za-z0-9_-]{22}$/);
  });

  it.each([0, 1, 15, 17, 32])('%i bytes: refused', (n) => {
    expect(() => erasureId(Buffer.alloc(n))).toThrow(new RangeError('an erasure id takes 16 random bytes'));
  });
});

describe('EXPORT_STATEMENT', () => {
  it('answers each point of LGPD art. 19 §1, with no CPF', () => {
    expect(Object.keys(EXPORT_STATEMENT).sort()).toEqual(
      ['controller', 'criteria', 'legal_basis', 'origin', 'purpose', 'retention'].sort(),
    );
    for (const text of Object.values(EXPORT_STATEMENT)) expect(text.length).toBeGreaterThan(40);
  });
});
