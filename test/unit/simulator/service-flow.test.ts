import { planAdvance } from '../../../src/simulator/service-flow';

/** How the control API's `advance` walks a proposal through the service's flow. */

const at = (position: number, final = false) => ({ position, final });

describe('planAdvance', () => {
  it('one step at a time along the happy path, from before the first event to the payment', () => {
    expect(planAdvance(at(-1))).toEqual({ ok: true, eventos: ['proposta.criada'] });
    expect(planAdvance(at(1))).toEqual({ ok: true, eventos: ['proposta.aprovada'] });
    expect(planAdvance(at(7))).toEqual({ ok: true, eventos: ['pagamento.realizado'] });
    expect(planAdvance(at(8))).toEqual({ ok: false, message: 'nothing left to advance' });
  });

  it('to a happy-path event: every event between, in order', () => {
    expect(planAdvance(at(1), 'formalizacao.iniciada')).toEqual({
      ok: true,
      eventos: ['proposta.aprovada', 'averbacao.solicitada', 'averbacao.aprovada', 'formalizacao.iniciada'],
    });
    expect(planAdvance(at(4), 'averbacao.aprovada')).toMatchObject({ ok: false });
  });

  it('to a detour: the happy path up to the event it follows, then the detour', () => {
    expect(planAdvance(at(2), 'averbacao.negada')).toEqual({
      ok: true,
      eventos: ['averbacao.solicitada', 'averbacao.negada'],
    });
    expect(planAdvance(at(5), 'pagamento.falha')).toEqual({
      ok: true,
      eventos: ['formalizacao.concluida', 'efetivacao.concluida', 'pagamento.falha'],
    });
    expect(planAdvance(at(0), 'proposta.negada')).toEqual({ ok: true, eventos: ['proposta.negada'] });
    expect(planAdvance(at(1), 'proposta.negada')).toEqual({
      ok: false,
      message: 'the proposal is already past the point of proposta.negada',
    });
  });

  it('a cancellation at any point; nothing after a final event; an unknown name refused', () => {
    expect(planAdvance(at(6), 'proposta.cancelada')).toEqual({ ok: true, eventos: ['proposta.cancelada'] });
    expect(planAdvance(at(2, true), 'pagamento.realizado')).toEqual({
      ok: false,
      message: 'the proposal is at a final status',
    });
    expect(planAdvance(at(2), 'proposta.inventada')).toEqual({
      ok: false,
      message: 'unknown evento "proposta.inventada"',
    });
  });
});
