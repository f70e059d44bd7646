import { createHmac, timingSafeEqual } from 'node:crypto';
import { join } from 'node:path';

import * as Signature from '../../../src/domain/signature';
import type { DigestEqual } from '../../../src/domain/signature';
import { loadAgainInEachTest } from './fresh-module';

// Loaded again in each test, so that Stryker runs these tests against its header pattern too
// (fresh-module.ts).
loadAgainInEachTest(Signature, join(__dirname, '../../../src/domain/signature'));
const { constantTimeEqual, parseSignatureHeader, sign, verifySignature } = Signature;

// Published vectors of the same sha256= scheme (GitHub's webhook docs and octokit/webhooks-methods).
const VECTORS = [
  {
    name: 'GitHub docs vector',
    secret: "It's a Secret to Everybody",
    body: 'Hello, World!',
    signature: 'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17',
  },
  {
    name: 'octokit vector',
    secret: 'mysecret',
    body: '{"foo":"bar"}',
    signature: 'sha256=4864d2759938a15468b5df9ade20bf161da9b4f737ea61794142f3484236bda3',
  },
];

describe('sign', () => {
  it.each(VECTORS)('$name', ({ secret, body, signature }) => {
    expect(sign(secret, body)).toBe(signature);
    expect(sign(secret, Buffer.from(body))).toBe(signature);
  });

  // Regression vector: a body with multi-byte UTF-8 must be signed over its bytes, not its UTF-16
  // code units or a re-serialised JSON.
  it('signs a multi-byte UTF-8 body over its bytes', () => {
    const body = Buffer.from('{"no_conveniada":"Ação Comércio Ltda — São Paulo 💸"}', 'utf8');
    const sig = sign('segredo', body);
    expect(verifySignature(body, sig, ['segredo'])).toEqual({ ok: true, secretIndex: 0 });
    const latin1 = Buffer.from(body.toString('utf8'), 'latin1');
    expect(verifySignature(latin1, sig, ['segredo'])).toEqual({ ok: false, reason: 'mismatch' });
  });
});

describe('verifySignature', () => {
  const secret = 'mysecret';
  const body = Buffer.from('{"foo":"bar"}');
  const good = 'sha256=4864d2759938a15468b5df9ade20bf161da9b4f737ea61794142f3484236bda3';

  it('accepts the published vector', () => {
    expect(verifySignature(body, good, [secret])).toEqual({ ok: true, secretIndex: 0 });
  });

  it.each([
    ['wrong secret', body, good, ['not-my-secret'], 'mismatch'],
    ['one flipped byte in the body', Buffer.from('{"foo":"bas"}'), good, [secret], 'mismatch'],
    [
      'a trailing newline the sender did not sign',
      Buffer.from('{"foo":"bar"}\n'),
      good,
      [secret],
      'mismatch',
    ],
    ['missing header', body, undefined, [secret], 'missing'],
    ['empty header', body, '', [secret], 'missing'],
    ['no sha256= prefix', body, good.slice('sha256='.length), [secret], 'malformed'],
    ['another algorithm prefix', body, good.replace('sha256=', 'sha1='), [secret], 'malformed'],
    ['text before the prefix', body, `v1,${good}`, [secret], 'malformed'],
    ['short digest', body, good.slice(0, -2), [secret], 'malformed'],
    ['long digest', body, `${good}00`, [secret], 'malformed'],
    ['non-hex digest', body, `${good.slice(0, -1)}g`, [secret], 'malformed'],
    ['two headers', body, [good, good], [secret], 'malformed'],
    ['no secrets configured', body, good, [], 'mismatch'],
  ] as const)('rejects %s', (_name, b, header, secrets, reason) => {
    expect(verifySignature(b, header, secrets)).toEqual({ ok: false, reason });
  });

  it('flipping any single bit of the digest is rejected', () => {
    const hex = good.slice('sha256='.length);
    for (let i = 0; i < hex.length; i++) {
      const flipped =
        hex.slice(0, i) + (Number.parseInt(hex[i] as string, 16) ^ 1).toString(16) + hex.slice(i + 1);
      expect(verifySignature(body, `sha256=${flipped}`, [secret]).ok).toBe(false);
    }
  });

  it('accepts the second secret of a rotation and says which one matched', () => {
    expect(verifySignature(body, good, ['new-secret', secret])).toEqual({ ok: true, secretIndex: 1 });
    expect(verifySignature(body, good, [secret, 'new-secret'])).toEqual({ ok: true, secretIndex: 0 });
  });

  it.each<[string[], number]>([
    [[secret, secret], 0],
    [['other', secret, secret], 1],
    [['other', secret, 'new-secret', secret], 1],
  ])('a secret listed twice (%j): the first that matches is the one reported', (secrets, index) => {
    expect(verifySignature(body, good, secrets)).toEqual({ ok: true, secretIndex: index });
  });

  // Issue 37: every secret is compared, matching or not, so the time taken cannot tell which one
  // matched. Structural, not timed: the comparisons are counted through `equal`, and each must be
  // of that secret's own digest (a loop that stopped at the first match, or skipped the comparison
  // once one had matched, fails here).
  describe('compares every secret, even after one has matched', () => {
    const hmac = (key: string) => createHmac('sha256', key).update(body).digest();
    it.each<[string, string[], number | null]>([
      ['the first matches', [secret, 'new-secret', 'newer-secret'], 0],
      ['the second matches', ['new-secret', secret, 'newer-secret'], 1],
      ['the last matches', ['new-secret', 'newer-secret', secret], 2],
      ['all match', [secret, secret, secret], 0],
      ['none matches', ['new-secret', 'newer-secret', 'newest-secret'], null],
      ['a single secret, matching', [secret], 0],
    ])('%s', (_name, secrets, index) => {
      const compared: Buffer[] = [];
      const equal: DigestEqual = (expected, received) => {
        compared.push(expected);
        return timingSafeEqual(expected, received);
      };
      const verdict = verifySignature(body, good, secrets, equal);
      expect(verdict).toEqual(
        index === null ? { ok: false, reason: 'mismatch' } : { ok: true, secretIndex: index },
      );
      expect(compared).toEqual(secrets.map(hmac));
    });

    it.each([
      ['missing', undefined],
      ['malformed', 'sha256=xyz'],
    ])('a %s header: no HMAC is compared', (reason, header) => {
      let comparisons = 0;
      const equal: DigestEqual = (expected, received) => {
        comparisons += 1;
        return timingSafeEqual(expected, received);
      };
      expect(verifySignature(body, header, [secret, 'new-secret'], equal)).toEqual({ ok: false, reason });
      expect(comparisons).toBe(0);
    });
  });

  it('tolerates upper-case hex and surrounding spaces', () => {
    expect(verifySignature(body, ` sha256=${good.slice(7).toUpperCase()} `, [secret]).ok).toBe(true);
  });
});

describe('parseSignatureHeader', () => {
  it('returns the 32-byte digest', () => {
    const parsed = parseSignatureHeader(`sha256=${'ab'.repeat(32)}`);
    expect(parsed.ok && parsed.digest.length).toBe(32);
  });
});

describe('constantTimeEqual', () => {
  it.each([
    ['abc', 'abc', true],
    ['abc', 'abd', false],
    ['abc', 'abcd', false],
    ['', '', true],
  ])('%s vs %s', (a, b, expected) => {
    expect(constantTimeEqual(a, b)).toBe(expected);
  });
});
