import { join } from 'node:path';

import { Webhook } from 'standardwebhooks';
import * as StandardWebhooks from '../../../../src/domain/forwarding/standard-webhooks';
import { loadAgainInEachTest } from '../fresh-module';

// Loaded again in each test, so that Stryker runs these tests against its module-level tables and
// patterns too (fresh-module.ts).
loadAgainInEachTest(StandardWebhooks, join(__dirname, '../../../../src/domain/forwarding/standard-webhooks'));
const { secretKey, signStandardWebhook, standardWebhookHeaders, verifyStandardWebhook } = StandardWebhooks;

// The specification's own vector (standard-webhooks/libraries/javascript, "sign function works").
const SPEC = {
  secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  id: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
  timestampSeconds: 1614265330,
  body: '{"test": 2432232314}',
  signature: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
};

// Computed with `openssl dgst -sha256 -hmac … -binary | base64`, not with the code under test.
const UTF8_BODY = '{"cidade":"São Paulo","etapa":"averbação"}';
const UTF8 = { id: 'msg_2Kp4', timestampSeconds: 1_700_000_000, body: UTF8_BODY };
const VECTORS = [
  { name: 'spec vector, whsec_ secret', secret: SPEC.secret, input: SPEC, signature: SPEC.signature },
  {
    name: 'UTF-8 body, whsec_ secret',
    secret: SPEC.secret,
    input: UTF8,
    signature: 'v1,B8ZxseqGuJmnglD/tD7QsB/YApWG269ibZ3fPf+T6No=',
  },
  {
    name: 'UTF-8 body, plain string secret (its UTF-8 bytes)',
    secret: 'some-string',
    input: UTF8,
    signature: 'v1,G1EsRG9NjvpgiJFLuwnTJQXCAM8vHl/hZCEEKdRJPSc=',
  },
  {
    name: 'UTF-8 body, non-ASCII string secret',
    secret: 'segredo-ação',
    input: UTF8,
    signature: 'v1,XbNoiJ1wI/w3U8eQ4DmgyfI2rEW7SI6bw8gCSJsPlKM=',
  },
];

describe('secretKey', () => {
  it('decodes the base64 after whsec_', () => {
    expect(secretKey('whsec_c2VncmVkbw==')).toEqual(Buffer.from('segredo'));
    expect(secretKey('whsec_c2VncmVkbw')).toEqual(Buffer.from('segredo')); // unpadded
  });

  it('keys any other string by its UTF-8 bytes', () => {
    expect(secretKey('segredo-ação')).toEqual(
      Buffer.from([...Buffer.from('segredo-a'), 0xc3, 0xa7, 0xc3, 0xa3, 0x6f]),
    );
    expect(secretKey('c2VncmVkbw==')).toEqual(Buffer.from('c2VncmVkbw==')); // no prefix: not decoded
  });

  const EMPTY = 'a signing secret must not be empty';
  const NOT_BASE64 = 'a whsec_ secret must be base64 after the prefix';
  it.each([
    ['an empty string', '', EMPTY],
    ['a bare prefix', 'whsec_', EMPTY],
    ['base64 with a bad character', 'whsec_c2Vnc*mVkbw==', NOT_BASE64],
    ['base64 with inner padding', 'whsec_c2Vn=cmVkbw', NOT_BASE64],
    ['base64url instead of base64', 'whsec_-_-_', NOT_BASE64],
    // Decodable, but not as base64 writes it: bits set past the last byte, too much padding.
    ['base64 with stray bits in its last character', 'whsec_YR', NOT_BASE64],
    ['base64 with three padding characters', 'whsec_YQ===', NOT_BASE64],
    ['base64 padded where no padding is due', 'whsec_YWJj==', NOT_BASE64],
  ])('refuses %s', (_name, secret, message) => {
    expect(() => secretKey(secret)).toThrow(new RangeError(message));
  });
});

describe('signStandardWebhook', () => {
  it.each(VECTORS)('$name', ({ secret, input, signature }) => {
    expect(signStandardWebhook(input, [secret])).toBe(signature);
  });

  it('gives one v1 entry per secret, space-separated, in order (rotation)', () => {
    expect(signStandardWebhook(UTF8, [SPEC.secret, 'some-string'])).toBe(
      'v1,B8ZxseqGuJmnglD/tD7QsB/YApWG269ibZ3fPf+T6No= v1,G1EsRG9NjvpgiJFLuwnTJQXCAM8vHl/hZCEEKdRJPSc=',
    );
  });

  const TIMESTAMP = 'timestampSeconds must be a non-negative integer';
  it.each([
    ['no secret', SPEC, [], 'at least one signing secret is needed'],
    ['a fractional timestamp', { ...SPEC, timestampSeconds: 1614265330.5 }, [SPEC.secret], TIMESTAMP],
    ['a negative timestamp', { ...SPEC, timestampSeconds: -1 }, [SPEC.secret], TIMESTAMP],
    ['a bad whsec_ secret', SPEC, ['whsec_!!'], 'a whsec_ secret must be base64 after the prefix'],
  ])('refuses %s', (_name, input, secrets, message) => {
    expect(() => signStandardWebhook(input, secrets)).toThrow(new RangeError(message));
  });

  it('signs at timestamp 0 (the epoch is a non-negative integer)', () => {
    expect(signStandardWebhook({ ...SPEC, timestampSeconds: 0 }, [SPEC.secret])).toMatch(
      /^v1,[A-Za-z0-9+/]{43}=$/,
    );
  });
});

describe('standardWebhookHeaders', () => {
  it('gives the three headers of the specification', () => {
    expect(standardWebhookHeaders(SPEC, [SPEC.secret])).toEqual({
      'webhook-id': SPEC.id,
      'webhook-timestamp': '1614265330',
      'webhook-signature': SPEC.signature,
    });
  });
});

// One valid signed message; each row of BROKEN breaks one thing in it.
const now = SPEC.timestampSeconds;
type Message = Parameters<typeof verifyStandardWebhook>[0];
const valid = (): Message => ({
  headers: standardWebhookHeaders(SPEC, [SPEC.secret]),
  body: SPEC.body,
  secrets: [SPEC.secret],
  nowSeconds: now,
});
const withHeader = (name: string, value: string | undefined) => (m: Message) => {
  m.headers = { ...m.headers, [name]: value };
};
const BROKEN: [string, (m: Message) => void, string][] = [
  ['no webhook-id', withHeader('webhook-id', undefined), 'missing_headers'],
  ['an empty webhook-id', withHeader('webhook-id', ''), 'missing_headers'],
  ['no webhook-timestamp', withHeader('webhook-timestamp', undefined), 'missing_headers'],
  ['no webhook-signature', withHeader('webhook-signature', undefined), 'missing_headers'],
  ['a blank webhook-signature', withHeader('webhook-signature', '  '), 'missing_headers'],
  ['a word for a timestamp', withHeader('webhook-timestamp', 'hello'), 'bad_timestamp'],
  ['a timestamp with trailing junk', withHeader('webhook-timestamp', '1614265330abc'), 'bad_timestamp'],
  ['a fractional timestamp', withHeader('webhook-timestamp', '1614265330.0'), 'bad_timestamp'],
  ['a negative timestamp', withHeader('webhook-timestamp', '-1614265330'), 'bad_timestamp'],
  ['a timestamp in milliseconds', withHeader('webhook-timestamp', '1614265330000'), 'too_new'],
  ['a clock 301 s ahead', (m) => void (m.nowSeconds = now + 301), 'too_old'],
  ['a clock 301 s behind', (m) => void (m.nowSeconds = now - 301), 'too_new'],
  ['a tighter tolerance', (m) => Object.assign(m, { nowSeconds: now + 11, toleranceSeconds: 10 }), 'too_old'],
  [
    'another timestamp within tolerance',
    withHeader('webhook-timestamp', String(now + 1)),
    'no_matching_signature',
  ],
  ['another id', withHeader('webhook-id', 'msg_other'), 'no_matching_signature'],
  [
    'one byte of the body changed',
    (m) => void (m.body = m.body.replace('2432', '2433')),
    'no_matching_signature',
  ],
  ['a trailing newline in the body', (m) => void (m.body += '\n'), 'no_matching_signature'],
  ['another secret', (m) => void (m.secrets = ['whsec_c2VncmVkbw==']), 'no_matching_signature'],
  ['no secret configured', (m) => void (m.secrets = []), 'no_matching_signature'],
  [
    'a truncated signature',
    withHeader('webhook-signature', SPEC.signature.slice(0, 20)),
    'no_matching_signature',
  ],
  ['a bare v1,', withHeader('webhook-signature', 'v1,'), 'no_matching_signature'],
  [
    'the right digest as v2',
    withHeader('webhook-signature', SPEC.signature.replace('v1,', 'v2,')),
    'no_matching_signature',
  ],
  [
    'the digest without a version',
    withHeader('webhook-signature', SPEC.signature.slice(3)),
    'no_matching_signature',
  ],
  [
    'the digest in hex',
    withHeader('webhook-signature', `v1,${Buffer.from(SPEC.signature.slice(3), 'base64').toString('hex')}`),
    'no_matching_signature',
  ],
  [
    'base64 without its padding',
    withHeader('webhook-signature', SPEC.signature.replace(/=$/, '')),
    'no_matching_signature',
  ],
];

describe('verifyStandardWebhook', () => {
  it('accepts the valid message', () => {
    expect(verifyStandardWebhook(valid())).toEqual({ ok: true });
  });

  it.each(BROKEN)('refuses %s', (_name, breakIt, reason) => {
    const message: Message = valid();
    breakIt(message);
    expect(verifyStandardWebhook(message)).toEqual({ ok: false, reason });
  });

  it.each([
    ['exactly 300 s late', now + 300],
    ['exactly 300 s early', now - 300],
  ])('accepts a timestamp %s (the window is inclusive)', (_name, nowSeconds) => {
    expect(verifyStandardWebhook({ ...valid(), nowSeconds })).toEqual({ ok: true });
  });

  it('reads header names case-insensitively', () => {
    const headers = {
      'Webhook-Id': SPEC.id,
      'WEBHOOK-TIMESTAMP': '1614265330',
      'Webhook-Signature': SPEC.signature,
    };
    expect(verifyStandardWebhook({ ...valid(), headers })).toEqual({ ok: true });
  });

  it('reads header values without the white space around them, and skips a blank one for another of the name', () => {
    const padded = {
      'webhook-id': ` ${SPEC.id} `,
      'webhook-timestamp': ' 1614265330\t',
      'webhook-signature': ` ${SPEC.signature} `,
    };
    expect(verifyStandardWebhook({ ...valid(), headers: padded })).toEqual({ ok: true });
    const blankFirst = { 'Webhook-Id': ' ', ...valid().headers };
    expect(verifyStandardWebhook({ ...valid(), headers: blankFirst })).toEqual({ ok: true });
  });

  it('finds the valid entry among others, other versions and extra spaces', () => {
    const signature = `v1a,bm90IGEga2V5  v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= ${SPEC.signature} v2,x`;
    expect(
      verifyStandardWebhook({ ...valid(), headers: { ...valid().headers, 'webhook-signature': signature } }),
    ).toEqual({ ok: true });
  });
});

describe('verifyStandardWebhook during a secret rotation', () => {
  const OLD = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
  const NEW = 'segredo-novo-2025';
  const message = (signedWith: string[]) => ({
    headers: standardWebhookHeaders(UTF8, signedWith),
    body: UTF8_BODY,
    nowSeconds: UTF8.timestampSeconds,
  });

  it.each([
    ['both, receiver knows the old one', [OLD, NEW], [OLD]],
    ['both, receiver knows the new one', [OLD, NEW], [NEW]],
    ['the old one, receiver knows both', [OLD], [NEW, OLD]],
    ['the new one, receiver knows both', [NEW], [OLD, NEW]],
  ])('signed with %s: verifies', (_name, signedWith, secrets) => {
    expect(verifyStandardWebhook({ ...message(signedWith), secrets })).toEqual({ ok: true });
  });

  it('signed with the old one only, receiver knows only the new one: refused', () => {
    expect(verifyStandardWebhook({ ...message([OLD]), secrets: [NEW] })).toEqual({
      ok: false,
      reason: 'no_matching_signature',
    });
  });
});

// Regression vector: the body is signed as UTF-8 bytes; its Latin-1 reading is another body.
describe('verifyStandardWebhook on a body with accents', () => {
  it('verifies it, and not its Latin-1 mis-decoding', () => {
    const headers = standardWebhookHeaders(UTF8, ['some-string']);
    const base = { headers, secrets: ['some-string'], nowSeconds: UTF8.timestampSeconds };
    expect(verifyStandardWebhook({ ...base, body: UTF8_BODY })).toEqual({ ok: true });
    const mojibake = Buffer.from(UTF8_BODY, 'utf8').toString('latin1');
    expect(mojibake).toContain('SÃ£o Paulo');
    expect(verifyStandardWebhook({ ...base, body: mojibake })).toEqual({
      ok: false,
      reason: 'no_matching_signature',
    });
  });
});

// The independent implementation (npm `standardwebhooks`). It checks the timestamp against its own
// clock, so these messages are stamped with the current time.
describe('interoperability with the standardwebhooks library', () => {
  const nowSeconds = () => Math.floor(Date.now() / 1000);
  const message = () => ({ id: 'msg_interop_1', timestampSeconds: nowSeconds(), body: UTF8_BODY });

  it('the library verifies what we sign with a whsec_ secret', () => {
    const input = message();
    const headers = standardWebhookHeaders(input, [SPEC.secret]);
    expect(new Webhook(SPEC.secret).verify(input.body, headers)).toEqual(JSON.parse(UTF8_BODY));
  });

  it('the library verifies our rotation header with either secret', () => {
    const input = message();
    const headers = standardWebhookHeaders(input, [SPEC.secret, 'whsec_c2VncmVkbw==']);
    expect(() => new Webhook(SPEC.secret).verify(input.body, headers)).not.toThrow();
    expect(() => new Webhook('whsec_c2VncmVkbw==').verify(input.body, headers)).not.toThrow();
  });

  it('we verify what the library signs', () => {
    const input = message();
    const signature = new Webhook(SPEC.secret).sign(
      input.id,
      new Date(input.timestampSeconds * 1000),
      input.body,
    );
    const headers = {
      'webhook-id': input.id,
      'webhook-timestamp': String(input.timestampSeconds),
      'webhook-signature': signature,
    };
    expect(
      verifyStandardWebhook({ headers, body: input.body, secrets: [SPEC.secret], nowSeconds: nowSeconds() }),
    ).toEqual({
      ok: true,
    });
  });

  it('agrees with the library on the fixed vectors', () => {
    const at = new Date(SPEC.timestampSeconds * 1000);
    expect(new Webhook(SPEC.secret).sign(SPEC.id, at, SPEC.body)).toBe(
      signStandardWebhook(SPEC, [SPEC.secret]),
    );
  });

  // What a partner with FORWARD_SECRET=<any string> does with the library.
  describe.each(['some-string', 'segredo-ação'])('a plain string secret %p', (secret) => {
    it('verifies as whsec_ + base64 of its UTF-8 bytes', () => {
      const input = message();
      const headers = standardWebhookHeaders(input, [secret]);
      const whsec = `whsec_${Buffer.from(secret, 'utf8').toString('base64')}`;
      expect(() => new Webhook(whsec).verify(input.body, headers)).not.toThrow();
      expect(
        verifyStandardWebhook({ headers, body: input.body, secrets: [whsec], nowSeconds: nowSeconds() }),
      ).toEqual({
        ok: true,
      });
    });

    it("verifies with the library's raw format given the UTF-8 bytes", () => {
      const input = message();
      const headers = standardWebhookHeaders(input, [secret]);
      const raw = new Webhook(new Uint8Array(Buffer.from(secret, 'utf8')), { format: 'raw' });
      expect(() => raw.verify(input.body, headers)).not.toThrow();
    });
  });

  // Pitfall worth knowing: the raw format given a *string* keys it by UTF-16 code units truncated
  // to bytes (Latin-1), not UTF-8, so it only agrees for ASCII secrets.
  it('the raw format given the string itself agrees only for ASCII secrets', () => {
    const input = message();
    const ascii = standardWebhookHeaders(input, ['some-string']);
    expect(() => new Webhook('some-string', { format: 'raw' }).verify(input.body, ascii)).not.toThrow();
    const accented = standardWebhookHeaders(input, ['segredo-ação']);
    expect(() => new Webhook('segredo-ação', { format: 'raw' }).verify(input.body, accented)).toThrow(
      'No matching signature found',
    );
  });
});
