import { join } from 'node:path';
import { migratePostgres } from '../../src/cluster/pg-migrate';
import { MARK_STALE, RECORD_POLL } from '../../src/domain/sql/registry-poll';
import { averbacoesRepo } from '../../src/store/averbacoes';
import { openStore } from '../../src/store/store';
import { pgBed } from '../helpers/cluster-bed';
import { rows } from '../helpers/cluster-db';
import { tempDir } from '../helpers/tmp';

/**
 * The registry poll's row updates are one text for both stores (src/domain/sql/registry-poll.ts):
 * the same calls on a SQLite log (through its repository, as the poller runs them) and on
 * PostgreSQL (as the poll job runs them) leave the same rows and give the same answers.
 */

const bed = pgBed({ prefix: 'pollsql' });
let tmp: ReturnType<typeof tempDir>;
beforeEach(async () => {
  await migratePostgres(bed.url);
  tmp = tempDir();
});
afterEach(() => tmp.cleanup());

const T = (s: number) => new Date(Date.UTC(2026, 2, 1, 0, 0, s)).toISOString();

interface Row {
  status: string;
  poll_attempts: number;
  next_poll_at: string | null;
  last_poll_at: string | null;
  last_poll_outcome: string | null;
  stale: boolean;
}

/** Each step: what happens to the row first (a webhook's final status, a stale mark), then a poll. */
const STEPS = [
  { name: 'a poll that keeps polling', before: null, attempts: 1, next: T(30), polling: true },
  { name: 'a poll with no next one', before: null, attempts: 2, next: null, polling: false },
  { name: 'a poll after another', before: null, attempts: 3, next: T(90), polling: true },
  {
    name: 'the webhook completed it meanwhile',
    before: 'completed',
    attempts: 4,
    next: T(120),
    polling: false,
  },
] as const;

it('record a poll and mark stale: the same rows and answers in SQLite and in PostgreSQL', async () => {
  const store = openStore(join(tmp.dir, 'poll.db'), { migrate: true });
  try {
    const repo = averbacoesRepo(store.db);
    const track = { requestId: 'req-1', correlationId: null, nuProposta: 7, via: 'declared' as const };
    repo.track({ ...track, status: 'queued', now: T(0), nextPollAt: T(10) });
    await bed.pool.query(
      `INSERT INTO averbacoes (request_id, nu_proposta, status, tracked_via, next_poll_at, created_at, updated_at)
       VALUES ('req-1', '7', 'queued', 'declared', $1, $2, $2)`,
      [T(10), T(0)],
    );
    const sqliteRow = (): Row => {
      const r = repo.get('req-1')!;
      return { ...pick(r), stale: r.stale === 1 };
    };
    const pgRow = async (): Promise<Row> => {
      const [r] = await rows<Record<string, unknown>>(
        bed.pool,
        "SELECT * FROM averbacoes WHERE request_id = 'req-1'",
      );
      const iso = (v: unknown) => (v === null ? null : (v as Date).toISOString());
      return {
        ...pick(r!),
        next_poll_at: iso(r!.next_poll_at),
        last_poll_at: iso(r!.last_poll_at),
        stale: r!.stale as boolean,
      };
    };
    const poll = async (attempts: number, next: string | null, now: string) => {
      const outcome = `ok:processing#${attempts}`;
      const here = repo.recordPoll('req-1', { attempts, nextPollAt: next, outcome, now });
      const [there] = await rows<{ polling: boolean }>(bed.pool, RECORD_POLL, [
        'req-1',
        attempts,
        next,
        now,
        outcome,
      ]);
      return [here, there?.polling];
    };
    for (const [i, s] of STEPS.entries()) {
      if (s.before === 'completed') {
        repo.setStatus('req-1', 'completed', T(i));
        await bed.pool.query("UPDATE averbacoes SET status = 'completed' WHERE request_id = 'req-1'");
      }
      expect([s.name, await poll(s.attempts, s.next, T(20 * (i + 1)))]).toEqual([
        s.name,
        [s.polling, s.polling],
      ]);
      expect(sqliteRow()).toEqual(await pgRow());
      expect(sqliteRow()).toMatchObject({
        poll_attempts: s.attempts,
        next_poll_at: s.polling ? s.next : null,
      });
    }
    // Back to polling, then stale: MARK_STALE on both.
    await bed.pool.query("UPDATE averbacoes SET status = 'processing' WHERE request_id = 'req-1'");
    repo.setStatus('req-1', 'processing', T(0));
    repo.markStale('req-1', T(140));
    await bed.pool.query(MARK_STALE, ['req-1', T(140)]);
    expect(sqliteRow()).toEqual(await pgRow());
    expect(sqliteRow()).toMatchObject({ stale: true, next_poll_at: null });
    // A poll that was in flight when it went stale: recorded, and polling stays off.
    expect(await poll(5, T(150), T(160))).toEqual([false, false]);
    expect(sqliteRow()).toEqual(await pgRow());
    expect(sqliteRow()).toMatchObject({ next_poll_at: null, poll_attempts: 5 });
  } finally {
    store.close();
  }
});

/** The poll's columns of a row, either store's (the timestamps and `stale` are read by each). */
function pick(r: object): Omit<Row, 'stale'> {
  const { status, poll_attempts, next_poll_at, last_poll_at, last_poll_outcome } = r as Row;
  return { status, poll_attempts, next_poll_at, last_poll_at, last_poll_outcome };
}
