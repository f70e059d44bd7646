import { FEED_DEFAULT_TYPES } from '../domain/forwarding/admin';
import type { MessageType } from '../domain/forwarding/destinations';
import type { FeedPage } from '../domain/forwarding/messages';
import { inList } from '../domain/sql/read-statements';
import type { StoreSql } from '../domain/sql/store-sql';

/**
 * The change feed (contract §8), written once for both stores: `forward_messages.id` follows commit
 * order in both (SQLite commits one write at a time and takes the id inside it; PostgreSQL's turn
 * holds a lock for its inserts until its commit, postgres/pg-outbox.ts), so a cursor never skips a
 * message committed after it was handed out.
 */

const CURSOR_TAG = 'f1';

/**
 * The feed's cursor: opaque to clients (base64url of a version tag and the message id), so its form
 * can change with a new tag while old cursors are still read.
 */
export function encodeFeedCursor(lastId: number): string {
  return Buffer.from(`${CURSOR_TAG}:${lastId}`, 'utf8').toString('base64url');
}

/** The message id a cursor stands for, or null when it is not one this code wrote. */
export function decodeFeedCursor(cursor: string): number | null {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(cursor)) return null;
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  const match = /^f1:(0|[1-9]\d{0,15})$/.exec(text);
  if (!match || encodeFeedCursor(Number(match[1])) !== cursor) return null;
  const id = Number(match[1]);
  return Number.isSafeInteger(id) ? id : null;
}

/**
 * Up to `limit` messages of `types` with an id above `afterId`, in id order. One statement, so one
 * snapshot in either store: the page and the newest id agree, and a page that is not full proves
 * nothing of these types lies between its last message and that id.
 */
export function feedReader(log: StoreSql) {
  return (
    afterId: number,
    limit: number,
    types: readonly MessageType[] = FEED_DEFAULT_TYPES,
  ): Promise<FeedPage> =>
    log.read(async (q) => {
      const rows = await q.rows<{ newest: number | null; id: number | null; body: string | null }>(
        `SELECT n.newest, p.id, p.body
         FROM (SELECT max(id) AS newest FROM forward_messages) n
         LEFT JOIN (SELECT id, body FROM forward_messages WHERE id > $1 AND type IN ${inList(types.length, 3)}
                    ORDER BY id LIMIT $2) p ON 1 = 1
         ORDER BY p.id`,
        [afterId, limit, ...types],
      );
      const messages = rows.flatMap((r) =>
        r.id === null || r.body === null ? [] : [{ id: r.id, body: r.body }],
      );
      const last = messages[messages.length - 1];
      if (messages.length === limit && last !== undefined) return { messages, lastId: last.id };
      return { messages, lastId: Math.max(afterId, rows[0]?.newest ?? 0) };
    });
}

/**
 * The messages of a page the change feed served, in the ledger of sharing (issue 45): the feed's
 * reader (`recipient`: `feed`, or a command's name) was sent them. Once per message and reader.
 */
export function feedSharing(log: StoreSql) {
  return (ids: readonly number[], recipient: string, at: string): Promise<number> =>
    ids.length === 0
      ? Promise.resolve(0)
      : log.write((q) =>
          q.run(
            `INSERT INTO sharing_ledger (recipient, channel, webhook_id, type, nu_proposta, request_id,
               first_sent_at, acknowledged_at)
             SELECT $1, 'feed', webhook_id, type, nu_proposta, request_id, $2, $2 FROM forward_messages
             WHERE ${q.dialect.inIds('id', '$3')} AND type <> 'subject.erased'
             ON CONFLICT (recipient, webhook_id) DO NOTHING`,
            [recipient, at, q.dialect.idList(ids)],
          ),
        );
}
