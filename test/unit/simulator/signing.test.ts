import { sameCredential, signatureOf } from '../../../src/simulator/signing';

/**
 * The simulator signs as the service does (interface §5), with its own code. The vectors were
 * computed with `openssl dgst -sha256 -hmac`, not with either side's code.
 */

describe('signatureOf', () => {
  it('matches the published vector for {"foo":"bar"} (the same scheme as GitHub webhooks)', () => {
    expect(signatureOf('mysecret', '{"foo":"bar"}')).toBe(
      'sha256=4864d2759938a15468b5df9ade20bf161da9b4f737ea61794142f3484236bda3',
    );
  });

  it('signs the UTF-8 bytes of a body with accents, keyed with a non-ASCII secret', () => {
    const body = '{"evento":"proposta.aprovada","dados":{"no_conveniada":"Empresa São João"}}';
    const expected = 'sha256=91b2350214cc5bec67a045eda1882982cc225f29fb92fb5ff27f8c8b266c16c5';
    expect(signatureOf('segredo-ç', body)).toBe(expected);
    expect(signatureOf('segredo-ç', Buffer.from(body, 'utf8'))).toBe(expected);
  });
});

describe('sameCredential', () => {
  it('is true only for the same text, whatever the lengths', () => {
    expect(sameCredential('partner-secret', 'partner-secret')).toBe(true);
    expect(sameCredential('partner-secreT', 'partner-secret')).toBe(false);
    expect(sameCredential('partner', 'partner-secret')).toBe(false);
    expect(sameCredential('', 'x')).toBe(false);
  });
});
