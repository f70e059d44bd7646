import type { ForwardedMessage } from './consumer';

/**
 * One forwarded message as one short line, what a lender's log would show:
 *
 * - `proposal.changed 100001 em_analise → pre_aprovada` (`(new)` for a proposal's first status;
 *   `, late: not applied` when the receiver recorded an event that arrived after the proposal had
 *   moved past it)
 * - `averbacao.result 100001 completed via webhook`
 * - `event.received 100001 proposta.aprovada`
 */
export function messageLine(message: ForwardedMessage): string {
  const { type, data } = message;
  const nu = text(data.nu_proposta);
  switch (type) {
    case 'proposal.changed': {
      const late = data.applied === false ? ', late: not applied' : '';
      return `${type} ${nu} ${text(data.from, '(new)')} → ${text(data.to)}${late}`;
    }
    case 'averbacao.result':
      return `${type} ${nu} ${text(data.status)} via ${text(data.source)}`;
    case 'event.received':
      return `${type} ${nu} ${text(data.evento, text(data.kind))}`;
    default:
      return `${type} ${nu}`;
  }
}

function text(value: unknown, fallback = '-'): string {
  return typeof value === 'string' || typeof value === 'number' ? String(value) : fallback;
}
