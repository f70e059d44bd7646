import { connectionSettings, describeDatabase, redactedMessage } from '../../../src/postgres/connection';

/**
 * What a replica's connections carry and what its logs may say of DATABASE_URL (issue 22, items 2
 * and 3): the server-side bounds as startup options, and the URL without its password.
 */

describe('connectionSettings', () => {
  it('sends the bounds and server-side keepalives as startup options, with client keepalives on', () => {
    const s = connectionSettings({ idleInTransactionMs: 7000, lockTimeoutMs: 3000 });
    expect(s.keepAlive).toBe(true);
    expect(s.keepAliveInitialDelayMillis).toBe(10_000);
    expect(s.options.split(' -c ').map((o) => o.replace(/^-c /, ''))).toEqual([
      'idle_in_transaction_session_timeout=7000',
      'tcp_keepalives_idle=10',
      'tcp_keepalives_interval=5',
      'tcp_keepalives_count=3',
      'tcp_user_timeout=15000',
    ]);
    // lock_timeout is the relay's own (SET LOCAL), never a session setting: migrations wait on purpose.
    expect(s.options).not.toContain('lock_timeout');
  });
});

describe('describeDatabase and redactedMessage', () => {
  const url =
    'postgres://consig:p%40ss-word-very-secret@db.internal:5433/consig?sslmode=require&password=other-secret-1';

  it('names user, host, port and database, never the password or the query string', () => {
    expect(describeDatabase(url)).toBe('postgres://consig@db.internal:5433/consig');
    expect(describeDatabase('not a url with a secret-password-123')).toBe('(DATABASE_URL unparsable)');
  });

  it('removes the URL and the password (raw or decoded) from a message', () => {
    const err = new Error(
      `cannot use ${url}; password p@ss-word-very-secret rejected (p%40ss-word-very-secret)`,
    );
    const message = redactedMessage(err, url);
    expect(message).not.toContain('ss-word-very-secret');
    expect(message).toBe('cannot use ***; password *** rejected (***)');
  });

  it('falls back to the error code when the message is empty (Node’s AggregateError of a refused connect)', () => {
    const err = Object.assign(new AggregateError([], ''), { code: 'ECONNREFUSED' });
    expect(redactedMessage(err, url)).toBe('ECONNREFUSED');
  });
});
