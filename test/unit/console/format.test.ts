import {
  ageOf,
  countOf,
  formatAge,
  formatCount,
  freeText,
  prettyBody,
  timeTag,
} from '../../../src/http/console/format';
import { deliveryBars } from '../../../src/http/console/pages/overview-page';
import { sortTimeline } from '../../../src/http/console/pages/proposal-page';
import { html } from '../../../src/http/console/html';

describe('formatting', () => {
  it.each([
    [0, '0 s'],
    [-5000, '0 s'],
    [59_999, '59 s'],
    [60_000, '1 min'],
    [3_599_000, '59 min'],
    [3_600_000, '1 h'],
    [3_660_000, '1 h 1 min'],
    [47 * 3_600_000, '47 h'],
    [48 * 3_600_000, '2 d'],
    [50 * 3_600_000, '2 d 2 h'],
  ])('formatAge(%p) = %p', (ms, text) => {
    expect(formatAge(ms)).toBe(text);
  });

  it('writes counts with thin grouping and a + at the cap', () => {
    expect(formatCount(1234567)).toBe('1 234 567');
    expect(formatCount(100_000, 100_000)).toBe('100 000+');
  });

  it('writes times as <time> with a machine-readable datetime', () => {
    expect(timeTag('2026-11-21T10:00:00.123Z').value).toBe(
      '<time datetime="2026-11-21T10:00:00.123Z">2026-11-21 10:00:00 UTC</time>',
    );
    expect(timeTag(null).value).toBe('—');
    expect(ageOf('2026-11-21T10:00:00Z', new Date('2026-11-21T10:05:00Z'))).toBe('5 min ago');
  });
});

describe('prettyBody', () => {
  it('pretty-prints JSON with every CPF masked, under its key and in free text', () => {
    const body = JSON.stringify({
      dados: { nu_cpf: '12345678909', cpf: 98765432100, nota: 'cpf 111.444.777-35', n: 1 },
    });
    const { text, note } = prettyBody(body);
    expect(note).toBeNull();
    expect(text).toContain('\n  "dados": {\n    "nu_cpf": "***.456.789-**"');
    expect(text).toContain('"cpf": "***.654.321-**"');
    expect(text).toContain('cpf ***.444.777-**');
    expect(text).not.toMatch(/12345678909|98765432100|111\.444\.777-35/);
  });

  it('shows text that is not JSON as received, CPFs masked; bytes and pruned bodies not at all', () => {
    expect(prettyBody('not json 12345678909')).toEqual({
      text: 'not json ***.456.789-**',
      note: expect.stringContaining('Not valid JSON'),
    });
    expect(prettyBody(Buffer.from([0xff]))).toEqual({
      text: null,
      note: expect.stringContaining('not UTF-8'),
    });
    expect(prettyBody(null).note).toContain('retention');
  });

  it('survives a body nested too deep to print again', () => {
    const deep = `${'['.repeat(20000)}"12345678909"${']'.repeat(20000)}`;
    const { text } = prettyBody(deep);
    expect(text).not.toContain('12345678909');
  });
});

describe('timeline order and chart bars', () => {
  it('sorts by time, then event before its duplicate, transition, averbação, poll and forward', () => {
    const item = (
      at: string,
      kind: 'event' | 'duplicate' | 'transition' | 'averbacao' | 'poll' | 'forward',
    ) => ({ at, kind, content: html`${kind}` });
    const sorted = sortTimeline([
      item('2', 'forward'),
      item('1', 'transition'),
      item('1', 'event'),
      item('0', 'poll'),
      item('1', 'duplicate'),
    ]);
    expect(sorted.map((i) => `${i.at}${i.kind}`)).toEqual([
      '0poll',
      '1event',
      '1duplicate',
      '1transition',
      '2forward',
    ]);
  });

  it('puts hourly counts into 24 hourly and 7 daily bars by outcome group', () => {
    const now = new Date('2026-11-21T10:30:00Z');
    const { hourly, daily } = deliveryBars(
      [
        { hour: '2026-11-21T10', outcome: 'accepted', n: 5 },
        { hour: '2026-11-21T10', outcome: 'invalid_signature', n: 2 },
        { hour: '2026-11-21T10', outcome: 'storage_unavailable', n: 1 },
        { hour: '2026-11-20T09', outcome: 'duplicate', n: 4 },
        { hour: '2026-11-14T09', outcome: 'accepted', n: 100 },
      ],
      now,
    );
    expect(hourly).toHaveLength(24);
    expect(hourly[23]).toEqual({ label: '10h', values: [5, 0, 0, 3] });
    expect(hourly[0]?.label).toBe('11h');
    expect(daily.map((d) => d.label)).toEqual([
      '11-15',
      '11-16',
      '11-17',
      '11-18',
      '11-19',
      '11-20',
      '11-21',
    ]);
    expect(daily[5]?.values).toEqual([0, 4, 0, 0]);
    expect(daily[6]?.values).toEqual([5, 0, 0, 3]);
  });
});

describe('countOf', () => {
  it.each([
    [0, 'attempt', undefined, '0 attempts'],
    [1, 'attempt', undefined, '1 attempt'],
    [2, 'attempt', undefined, '2 attempts'],
    [1, 'delivery', 'deliveries', '1 delivery'],
    [12345, 'delivery', 'deliveries', '12 345 deliveries'],
  ])('%p %s → %p', (n, one, many, expected) => {
    expect(countOf(n, one, many)).toBe(expected);
  });
});

describe('freeText: a log text (an error, a detail) as the console shows it', () => {
  it.each<[string | null | undefined, number | undefined, string]>([
    [null, undefined, ''],
    [undefined, undefined, ''],
    ['handler failed for cpf 12345678909', undefined, 'handler failed for cpf ***.456.789-**'],
    ['servidor 123.456.789-09 não encontrado', undefined, 'servidor ***.456.789-** não encontrado'],
    ['{"nu_cpf":"12345678909"}', undefined, '{"nu_cpf":"***.456.789-**"}'],
    // Runs of 12 and 14 digits are not CPFs.
    ['conta 123456789012 cnpj 12345678000195', undefined, 'conta 123456789012 cnpj 12345678000195'],
    // Cut after masking: the cut never leaves a CPF's digits whole, nor splits one into a new run.
    ['12345678909 and more', 8, '***.456.…'],
    ['abcdef', 3, 'abc…'],
    ['abc', 3, 'abc'],
  ])('%p (max %p) → %p', (text, max, expected) => {
    expect(freeText(text, max)).toBe(expected);
  });
});
