import type { MessageType } from '../domain/forwarding/destinations';
import type { FeedPage } from '../domain/forwarding/messages';
import type { Sql } from './sql';

/**
 * The change feed in cluster mode (contract §8): the same page as SQLite mode's
 * (src/store/forward-admin.ts `feed`), read from PostgreSQL's outbox. `forward_messages.id` follows
 * commit order there too (pg-outbox.ts takes a lock for the inserts until the commit), so a cursor
 * never skips a message committed after it was handed out.
 *
 * One statement, so one snapshot: the page and the newest id agree, and a page that is not full
 * proves nothing of these types lies between its last message and that id.
 */
export async function readFeedPage(
  sql: Sql,
  afterId: number,
  limit: number,
  types: readonly MessageType[],
): Promise<FeedPage> {
  const rows = await sql.query<{ id: string | null; body: string | null; newest: string | null }>(
    `SELECT p.id, p.body, n.newest
     FROM (SELECT max(id) AS newest FROM forward_messages) n
     LEFT JOIN LATERAL (SELECT id, body FROM forward_messages
                        WHERE id > $1 AND type = ANY($2::text[]) ORDER BY id LIMIT $3) p ON true
     ORDER BY p.id`,
    [afterId, [...types], limit],
  );
  const messages = rows.flatMap((r) =>
    r.id === null || r.body === null ? [] : [{ id: Number(r.id), body: r.body }],
  );
  const last = messages[messages.length - 1];
  if (messages.length === limit && last !== undefined) return { messages, lastId: last.id };
  return { messages, lastId: Math.max(afterId, Number(rows[0]?.newest ?? 0)) };
}
