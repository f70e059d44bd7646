import { horizontalBarChart, niceMax, stackedBarChart, summarise } from '../../../src/http/console/svg';
import { squash } from '../../helpers/console-client';

const series = [
  { name: 'accepted', className: 's-accepted' },
  { name: 'failed', className: 's-failed' },
];

describe('niceMax', () => {
  it.each([
    [0, 1],
    [-5, 1],
    [Number.NaN, 1],
    [1, 1],
    [3, 5],
    [7, 10],
    [12, 20],
    [50, 50],
    [51, 100],
    [999, 1000],
    [1234, 2000],
  ])('%p → %p', (max, expected) => {
    expect(niceMax(max)).toBe(expected);
  });
});

describe('stackedBarChart', () => {
  const spec = {
    title: 'Deliveries per hour',
    unit: 'hour',
    series,
    bars: [
      { label: '10h', values: [3, 1] },
      { label: '11h', values: [0, 0] },
      { label: '12h', values: [6, 0] },
    ],
  };

  it('is an image with a label that says the numbers, a title and a description', () => {
    const svg = squash(stackedBarChart(spec).value);
    expect(svg).toMatch(/^<svg class="chart" role="img" aria-label="[^"]+" viewBox="0 0 720 220"/);
    expect(summarise(spec)).toBe(
      'Deliveries per hour: 10 in total (accepted 9, failed 1); most in one hour: 12h with 6.',
    );
    expect(svg).toContain(`aria-label="${summarise(spec)}"`);
    expect(svg).toContain('<title>Deliveries per hour</title>');
    expect(svg).toContain(`<desc>${summarise(spec)}</desc>`);
  });

  it('draws one rect per non-zero value, stacked, heights proportional', () => {
    const svg = squash(stackedBarChart(spec).value);
    const rects = [
      ...svg.matchAll(/<rect class="(s-\w+)" x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="([\d.]+)">/g),
    ];
    expect(rects.map((r) => r[1])).toEqual(['s-accepted', 's-failed', 's-accepted']);
    const [a, f, b] = rects.map((r) => Number(r[3]));
    expect((a as number) / (b as number)).toBeCloseTo(0.5);
    expect((f as number) * 3).toBeCloseTo(a as number);
    expect(svg).not.toContain('style=');
  });

  it('says "none" for an empty chart, and escapes hostile labels', () => {
    const empty = { ...spec, bars: [{ label: '<b>"x"', values: [0, 0] }] };
    expect(summarise(empty)).toBe('Deliveries per hour: none.');
    const svg = stackedBarChart({
      ...spec,
      title: '<script>',
      bars: [{ label: '"><script>', values: [1, 0] }],
    }).value;
    expect(svg).not.toContain('<script>');
    expect(svg).toContain('&quot;&gt;&lt;script&gt;');
  });

  it('labels every n-th bar only', () => {
    const bars = Array.from({ length: 6 }, (_, i) => ({ label: `b${i}`, values: [1, 0] }));
    const svg = squash(stackedBarChart({ ...spec, bars, labelEvery: 3 }).value);
    expect([...svg.matchAll(/text-anchor="middle">(b\d)</g)].map((m) => m[1])).toEqual(['b0', 'b3']);
  });
});

describe('horizontalBarChart', () => {
  it('draws one labelled row per entry, summarised', () => {
    const svg = horizontalBarChart({
      title: 'Funnel',
      rows: [
        { label: 'Proposta · em_analise', value: 4 },
        { label: 'Pagamento · paga', value: 1, className: 's-final' },
      ],
    }).value;
    expect(svg).toContain('aria-label="Funnel: 5 in total (Proposta · em_analise 4, Pagamento · paga 1)."');
    expect(svg).toContain('class="s-final"');
    expect((svg.match(/<rect /g) ?? []).length).toBe(2);
  });
});
