import { html, type SafeHtml } from './html';

/**
 * Charts as SVG markup, computed on the server from plain data (no script, no style attributes:
 * colours come from classes in console.css, which the Content-Security-Policy allows). Each chart
 * is `role="img"` with an `aria-label` that says what the numbers are, a `<title>` and a `<desc>`;
 * the page puts the same numbers in a table next to it. Pure: data in, markup out.
 */

export interface ChartSeries {
  name: string;
  /** A class of console.css that colours the series (`s-accepted`). */
  className: string;
}

export interface StackedBarSpec {
  title: string;
  /** What one bar is, for the summary ("hour", "day"). */
  unit: string;
  series: readonly ChartSeries[];
  /** One bar per entry, oldest first; `values[i]` belongs to `series[i]`. */
  bars: readonly { label: string; values: readonly number[] }[];
  /** Draw the label of every n-th bar only (24 hour labels do not fit a phone). @default 1 */
  labelEvery?: number;
}

export interface HorizontalBarSpec {
  title: string;
  rows: readonly { label: string; value: number; className?: string }[];
}

const WIDTH = 720;
const HEIGHT = 220;
const PAD = { top: 12, right: 8, bottom: 28, left: 44 };

/** 0 → 1, else the smallest 1, 2 or 5 × 10^k at or above `max`: round numbers on the axis. */
export function niceMax(max: number): number {
  if (!(max > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(max));
  const step = [1, 2, 5, 10].find((m) => m * power >= max) ?? 10;
  return step * power;
}

const round = (n: number): number => Math.round(n * 100) / 100;
const sum = (values: readonly number[]): number => values.reduce((a, b) => a + b, 0);

/** "1 234 in total: accepted 1 200, failed 34; most in one hour: 13h with 120." */
export function summarise(spec: StackedBarSpec): string {
  const totals = spec.series.map((s, i) => ({
    name: s.name,
    n: sum(spec.bars.map((b) => b.values[i] ?? 0)),
  }));
  const total = sum(totals.map((t) => t.n));
  if (total === 0) return `${spec.title}: none.`;
  const parts = totals.filter((t) => t.n > 0).map((t) => `${t.name} ${t.n}`);
  const peak = spec.bars.reduce((best, b) => (sum(b.values) > sum(best.values) ? b : best));
  return `${spec.title}: ${total} in total (${parts.join(', ')}); most in one ${spec.unit}: ${peak.label} with ${sum(peak.values)}.`;
}

/** A stacked bar chart, one bar per period, one colour per series. */
export function stackedBarChart(spec: StackedBarSpec): SafeHtml {
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const max = niceMax(Math.max(0, ...spec.bars.map((b) => sum(b.values))));
  const step = plotW / Math.max(1, spec.bars.length);
  const every = Math.max(1, spec.labelEvery ?? 1);
  const y = (v: number) => round(PAD.top + plotH - (v / max) * plotH);
  const grid = [0, max / 2, max].map(
    (v) =>
      html`<line class="grid" x1="${PAD.left}" x2="${WIDTH - PAD.right}" y1="${y(v)}" y2="${y(v)}"></line>
        <text class="axis" x="${PAD.left - 6}" y="${y(v) + 4}" text-anchor="end">${v}</text>`,
  );
  const bars = spec.bars.map((bar, i) => {
    const x = round(PAD.left + i * step + step * 0.1);
    let base = 0;
    const rects = spec.series.map((s, k) => {
      const v = bar.values[k] ?? 0;
      if (v <= 0) return '';
      const rect = html`<rect
        class="${s.className}"
        x="${x}"
        y="${y(base + v)}"
        width="${round(step * 0.8)}"
        height="${round(y(base) - y(base + v))}"
        ><title>${bar.label}: ${s.name} ${v}</title></rect
      >`;
      base += v;
      return rect;
    });
    const label =
      i % every === 0
        ? html`<text class="axis" x="${round(x + step * 0.4)}" y="${HEIGHT - 10}" text-anchor="middle"
            >${bar.label}</text
          >`
        : '';
    return html`<g>${rects}${label}</g>`;
  });
  return chartSvg(spec.title, summarise(spec), HEIGHT, html`${grid}${bars}`);
}

/** The `<svg>` of a chart: an image to assistive technology, named and described by its summary. */
function chartSvg(title: string, summary: string, height: number, body: SafeHtml): SafeHtml {
  return html`<svg
    class="chart"
    role="img"
    aria-label="${summary}"
    viewBox="0 0 ${WIDTH} ${height}"
    xmlns="http://www.w3.org/2000/svg"
  >
    <title>${title}</title>
    <desc>${summary}</desc>
    ${body}
  </svg>`;
}

/** A horizontal bar chart, one labelled row per entry (the proposals funnel). */
export function horizontalBarChart(spec: HorizontalBarSpec): SafeHtml {
  const rowH = 22;
  const labelW = 190;
  const height = PAD.top + spec.rows.length * rowH + 8;
  const max = niceMax(Math.max(0, ...spec.rows.map((r) => r.value)));
  const plotW = WIDTH - labelW - 60;
  const rows = spec.rows.map((r, i) => {
    const top = PAD.top + i * rowH;
    const w = round((r.value / max) * plotW);
    return html`<g
      ><text class="axis" x="${labelW - 6}" y="${top + 15}" text-anchor="end">${r.label}</text
      ><rect class="${r.className ?? 's-bar'}" x="${labelW}" y="${top + 3}" width="${w}" height="${rowH - 6}"
        ><title>${r.label}: ${r.value}</title></rect
      ><text class="axis" x="${labelW + w + 6}" y="${top + 15}">${r.value}</text></g
    >`;
  });
  const total = sum(spec.rows.map((r) => r.value));
  const parts = spec.rows.filter((r) => r.value > 0).map((r) => `${r.label} ${r.value}`);
  const summary =
    total === 0 ? `${spec.title}: none.` : `${spec.title}: ${total} in total (${parts.join(', ')}).`;
  return chartSvg(spec.title, summary, height, html`${rows}`);
}
