import { horizontalBarChart, niceMax, stackedBarChart, summarise } from '../../../src/http/console/svg';
import { squash } from '../../helpers/console-client';

/** A chart's two drawings, the wide (desktop) one first, each a whole `<svg>…</svg>`. */
function drawings(markup: string): string[] {
  return squash(markup).match(/<svg[\s\S]*?<\/svg>/g) ?? [];
}

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
    const [svg, narrow] = drawings(stackedBarChart(spec).value) as [string, string];
    expect(svg).toMatch(/^<svg class="chart chart-wide" role="img" aria-label="[^"]+" viewBox="0 0 720 220"/);
    // The phone's drawing: the same image, drawn near a phone's width so its text is not scaled down.
    expect(narrow).toMatch(
      /^<svg class="chart chart-narrow" role="img" aria-label="[^"]+" viewBox="0 0 360 200"/,
    );
    expect(narrow).toContain(`aria-label="${summarise(spec)}"`);
    expect(summarise(spec)).toBe(
      'Deliveries per hour: 10 in total (accepted 9, failed 1); most in one hour: 12h with 6.',
    );
    expect(svg).toContain(`aria-label="${summarise(spec)}"`);
    expect(svg).toContain('<title>Deliveries per hour</title>');
    expect(svg).toContain(`<desc>${summarise(spec)}</desc>`);
  });

  it('draws one rect per non-zero value, stacked, heights proportional', () => {
    const svg = drawings(stackedBarChart(spec).value)[0] as string;
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

  it('labels every n-th bar only, and half as many of 24 bars on a phone', () => {
    const labels = (svg: string) => [...svg.matchAll(/text-anchor="middle">(b\d+)</g)].map((m) => m[1]);
    const six = Array.from({ length: 6 }, (_, i) => ({ label: `b${i}`, values: [1, 0] }));
    for (const svg of drawings(stackedBarChart({ ...spec, bars: six, labelEvery: 3 }).value))
      expect(labels(svg)).toEqual(['b0', 'b3']);
    const day = Array.from({ length: 24 }, (_, i) => ({ label: `b${i}`, values: [1, 0] }));
    const [wide, narrow] = drawings(stackedBarChart({ ...spec, bars: day, labelEvery: 3 }).value) as [
      string,
      string,
    ];
    expect(labels(wide)).toEqual(['b0', 'b3', 'b6', 'b9', 'b12', 'b15', 'b18', 'b21']);
    expect(labels(narrow)).toEqual(['b0', 'b6', 'b12', 'b18']);
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
    const [wide, narrow] = drawings(svg) as [string, string];
    expect((wide.match(/<rect /g) ?? []).length).toBe(2);
    expect((narrow.match(/<rect /g) ?? []).length).toBe(2);
  });

  it('anchors labels at their start, with room for the longest before the bars (none cut on the left)', () => {
    const long = 'Averbação · averbacao_solicitada';
    const [wide, narrow] = drawings(
      horizontalBarChart({ title: 'Funnel', rows: [{ label: long, value: 3 }] }).value,
    ) as [string, string];
    expect(wide).toContain(`<text class="axis" x="2" y="27">${long}</text>`);
    const barX = Number(/<rect class="s-bar" x="(\d+)"/.exec(wide)?.[1]);
    expect(barX).toBeGreaterThanOrEqual(2 + long.length * 7.2);
    // On a phone the label sits above its bar, from the left edge.
    expect(narrow).toContain(`<text class="axis" x="2" y="24">${long}</text>`);
    expect(narrow).toMatch(/<rect class="s-bar" x="2" y="30"/);
  });
});
