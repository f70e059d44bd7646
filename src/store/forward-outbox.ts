import {
  serializeMessage,
  type AverbacaoSnapshot,
  type EventEffects,
  type OutgoingMessage,
  type ProcessedEvent,
  type ProposalSnapshot,
  type RecordedTransition,
} from '../domain/forwarding/messages';
import type { Db } from './database';

/**
 * The outbox's writes (contract §8, migration 0007), run by the pipeline inside the transaction
 * that processes the event: what the event left behind is read back, and its messages are stored
 * with one delivery row per destination that wants them. A message is stored once per event and
 * type (UNIQUE (event_id, type)), so processing an event again (a replay, a retry after a crash)
 * adds nothing.
 */

const AVERBACAO_COLUMNS =
  'request_id, correlation_id, nu_proposta, status, result_source, stale, result_body, completed_at, updated_at';

// eslint-disable-next-line max-lines-per-function -- one closure per table family: its prepared statements and the two methods that run them, read together
export function forwardOutbox(db: Db) {
  const transition = db.prepare<
    [number],
    Omit<RecordedTransition, 'applied'> & { applied: number; nu_proposta: number | string }
  >(
    'SELECT nu_proposta, from_status, to_status, applied, reason FROM proposal_transitions WHERE event_id = ?',
  );
  const proposal = db.prepare<[number | string], ProposalSnapshot>(
    `SELECT nu_proposta, uuid, nu_cpf, nu_cnpj_conveniada, vl_emprestimo, no_conveniada, stage, status, last_evento,
       created_at, updated_at
     FROM proposals WHERE nu_proposta = ?`,
  );
  const latestAverbacao = db.prepare<[number | string], AverbacaoSnapshot>(
    `SELECT ${AVERBACAO_COLUMNS} FROM averbacoes WHERE nu_proposta = ? ORDER BY created_at DESC, request_id LIMIT 1`,
  );
  const trackedFor = db.prepare<[string], { nu_proposta: number | string | null }>(
    'SELECT nu_proposta FROM averbacoes WHERE request_id = ?',
  );
  const finishedBy = db.prepare<[string, number], AverbacaoSnapshot>(
    `SELECT ${AVERBACAO_COLUMNS} FROM averbacoes WHERE request_id = ? AND result_event_id = ?`,
  );
  const insertMessage = db.prepare<
    [string, string, number, string | null, number | string | null, string | null, string, string, string],
    { id: number }
  >(
    `INSERT INTO forward_messages (webhook_id, type, event_id, evento, nu_proposta, request_id, order_key, created_at, body)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (event_id, type) DO NOTHING
     RETURNING id`,
  );
  const insertDelivery = db.prepare<[number, string, string, string, string, string]>(
    `INSERT INTO forward_deliveries (message_id, destination, order_key, status, attempts, next_attempt_at, created_at, updated_at)
     VALUES (?, ?, ?, 'pending', 0, ?, ?, ?)
     ON CONFLICT (message_id, destination) DO NOTHING`,
  );

  return {
    /** What the processed event left behind in this transaction: its transition, proposal and averbação. */
    effectsOf(processed: ProcessedEvent): EventEffects {
      // A registry result rarely names its proposal; the tracked registration does, and puts all
      // of that registration's messages in the proposal's line (their order kept with its changes).
      const event =
        processed.nu_proposta === null && processed.request_id !== null && processed.kind !== 'event'
          ? { ...processed, nu_proposta: trackedFor.get(processed.request_id)?.nu_proposta ?? null }
          : processed;
      const t = transition.get(event.id);
      const p = t === undefined ? null : (proposal.get(t.nu_proposta) ?? null);
      return {
        event,
        transition:
          t === undefined
            ? null
            : {
                from_status: t.from_status,
                to_status: t.to_status,
                applied: t.applied === 1,
                reason: t.reason,
              },
        proposal: p,
        proposalAverbacao: p === null ? null : (latestAverbacao.get(p.nu_proposta) ?? null),
        finishedAverbacao:
          event.request_id === null || event.kind === 'event'
            ? null
            : (finishedBy.get(event.request_id, event.id) ?? null),
      };
    },

    /**
     * Stores a message and its delivery rows (due at once). Returns the message's row id, or null
     * when the event already has a message of this type (nothing is written then).
     */
    insert(message: OutgoingMessage, destinations: readonly string[]): number | null {
      const row = insertMessage.get(
        message.webhookId,
        message.type,
        message.eventId,
        message.evento,
        message.nuProposta,
        message.requestId,
        message.orderKey,
        message.createdAt,
        serializeMessage(message),
      );
      if (row === undefined) return null;
      for (const name of destinations) {
        insertDelivery.run(
          row.id,
          name,
          message.orderKey,
          message.createdAt,
          message.createdAt,
          message.createdAt,
        );
      }
      return row.id;
    },
  };
}

export type ForwardOutbox = ReturnType<typeof forwardOutbox>;
