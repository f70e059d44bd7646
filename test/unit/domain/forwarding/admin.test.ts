import {
  type AttemptRow,
  type ForwardRow,
  shownForward,
  shownForwardRow,
} from '../../../../src/domain/forwarding/admin';

/**
 * A delivery as operators see it (admin API, commands, console): every CPF masked, in its message
 * (even for a destination that gets it in full), its last error and its attempts' errors and
 * answers (a destination may echo the body it got) — contract §5. Runs of 12 and 14 digits are not
 * CPFs and stay as they are.
 */

const CPF = '12345678909';
const MASKED = '***.456.789-**';

const row = (last_error: string | null): ForwardRow => ({
  id: 1,
  message_id: 2,
  destination: 'crm',
  status: 'dead',
  attempts: 1,
  next_attempt_at: null,
  last_status: 400,
  last_error,
  created_at: '2026-11-21T10:00:00.000Z',
  updated_at: '2026-11-21T10:00:01.000Z',
  delivered_at: null,
  webhook_id: 'msg_1',
  type: 'proposal.changed',
  event_id: 3,
  evento: 'proposta.criada',
  nu_proposta: 7,
  request_id: null,
  order_key: 'p:7',
  message_created_at: '2026-11-21T10:00:00.000Z',
});

const attempt = (error: string | null, answer: string | null): AttemptRow => ({
  id: 1,
  attempt: 1,
  started_at: '2026-11-21T10:00:00.500Z',
  duration_ms: 12,
  http_status: 400,
  error,
  outcome: 'permanent',
  answer,
});

describe('shownForwardRow: the last error masked', () => {
  it.each<[string | null, string | null]>([
    [null, null],
    [`HTTP 400: cpf ${CPF} recusado`, `HTTP 400: cpf ${MASKED} recusado`],
    ['HTTP 400: cpf 123.456.789-09', `HTTP 400: cpf ${MASKED}`],
    ['HTTP 400: conta 123456789012 cnpj 12345678000195', 'HTTP 400: conta 123456789012 cnpj 12345678000195'],
  ])('%p → %p, the rest as it was', (error, expected) => {
    expect(shownForwardRow(row(error))).toEqual({ ...row(error), last_error: expected });
  });
});

describe('shownForward: the message, the errors and the answers masked', () => {
  const body = JSON.stringify({
    type: 'proposal.changed',
    data: {
      proposal: { nu_cpf: CPF, conta: 123456789012 },
      payload: { dados: { cpf: 98765432100, obs: `cpf ${CPF}`, cnpj: '12345678000195' } },
    },
  });

  it('masks every CPF in the message, whichever key or text holds it', () => {
    const shown = shownForward({ delivery: row(null), body, attempts: [] });
    expect(shown.message).toEqual({
      type: 'proposal.changed',
      data: {
        proposal: { nu_cpf: MASKED, conta: 123456789012 },
        payload: { dados: { cpf: '***.654.321-**', obs: `cpf ${MASKED}`, cnpj: '12345678000195' } },
      },
    });
    expect(JSON.stringify(shown)).not.toContain(CPF);
  });

  it.each<[string | null, string | null, string | null, string | null]>([
    [null, null, null, null],
    [`refused ${CPF}`, body, `refused ${MASKED}`, null],
    [
      'timeout',
      `{"echo":"${CPF}","conta":"123456789012"}`,
      'timeout',
      `{"echo":"${MASKED}","conta":"123456789012"}`,
    ],
  ])('an attempt with error %p and answer %p', (error, answer, shownError, shownAnswer) => {
    const shown = shownForward({ delivery: row(`last ${CPF}`), body, attempts: [attempt(error, answer)] });
    expect(shown.delivery.last_error).toBe(`last ${MASKED}`);
    expect(shown.attempts).toHaveLength(1);
    expect(shown.attempts[0]?.error).toBe(shownError);
    if (shownAnswer !== null) expect(shown.attempts[0]?.answer).toBe(shownAnswer);
    else if (answer !== null) expect(shown.attempts[0]?.answer).not.toContain(CPF);
    else expect(shown.attempts[0]?.answer).toBeNull();
    expect(shown.attempts[0]).toMatchObject({ id: 1, attempt: 1, http_status: 400, outcome: 'permanent' });
  });
});
