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

/**
 * A chart is drawn twice, once per frame, and console.css shows one: SVG text scales with the
 * viewBox, so the 720-unit drawing of a desktop would put 12 px labels at about 6 px on a phone.
 * The narrow frame is drawn near a phone's width (its text stays at least 10 px from 320 px up);
 * each is `display: none` where the other shows, so assistive technology meets one.
 */
interface Frame {
  kind: 'wide' | 'narrow';
  width: number;
  height: number;
  pad: { top: number; right: number; bottom: number; left: number };
  /** Bar labels drawn per `labelEvery` of the spec (fewer bars fit a phone's labels). */
  labelFactor: number;
}

const WIDE: Frame = {
  kind: 'wide',
  width: 720,
  height: 220,
  pad: { top: 12, right: 8, bottom: 28, left: 44 },
  labelFactor: 1,
};
const NARROW: Frame = {
  kind: 'narrow',
  width: 360,
  height: 200,
  pad: { top: 12, right: 6, bottom: 28, left: 40 },
  labelFactor: 2,
};
const FRAMES: readonly Frame[] = [WIDE, NARROW];

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
  return html`${FRAMES.map((frame) => stackedBars(spec, frame))}`;
}

function stackedBars(spec: StackedBarSpec, frame: Frame): SafeHtml {
  const { width, height, pad } = frame;
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const max = niceMax(Math.max(0, ...spec.bars.map((b) => sum(b.values))));
  const step = plotW / Math.max(1, spec.bars.length);
  const every = Math.max(1, spec.labelEvery ?? 1) * (spec.bars.length > 12 ? frame.labelFactor : 1);
  const y = (v: number) => round(pad.top + plotH - (v / max) * plotH);
  const grid = [0, max / 2, max].map(
    (v) =>
      html`<line class="grid" x1="${pad.left}" x2="${width - pad.right}" y1="${y(v)}" y2="${y(v)}"></line>
        <text class="axis" x="${pad.left - 6}" y="${y(v) + 4}" text-anchor="end">${v}</text>`,
  );
  const bars = spec.bars.map((bar, i) => {
    const x = round(pad.left + i * step + step * 0.1);
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
        ? html`<text class="axis" x="${round(x + step * 0.4)}" y="${height - 10}" text-anchor="middle"
            >${bar.label}</text
          >`
        : '';
    return html`<g>${rects}${label}</g>`;
  });
  return chartSvg(frame, height, { title: spec.title, summary: summarise(spec) }, html`${grid}${bars}`);
}

/** The `<svg>` of a chart: an image to assistive technology, named and described by its summary. */
function chartSvg(
  frame: Frame,
  height: number,
  text: { title: string; summary: string },
  body: SafeHtml,
): SafeHtml {
  return html`<svg
    class="chart chart-${frame.kind}"
    role="img"
    aria-label="${text.summary}"
    viewBox="0 0 ${frame.width} ${height}"
    xmlns="http://www.w3.org/2000/svg"
  >
    <title>${text.title}</title>
    <desc>${text.summary}</desc>
    ${body}
  </svg>`;
}

/** Room for a label of `chars` characters at the axis' 12 px (0.6 em each, more than most glyphs). */
const labelRoom = (chars: number): number => Math.ceil(chars * 7.2) + 12;

/**
 * A horizontal bar chart, one labelled row per entry (the proposals funnel). Wide: the label on the
 * left, as wide as the longest needs, anchored at its start so that it is never cut at the edge.
 * Narrow: the label above its bar, so that the bar keeps the phone's width.
 */
export function horizontalBarChart(spec: HorizontalBarSpec): SafeHtml {
  const max = niceMax(Math.max(0, ...spec.rows.map((r) => r.value)));
  const total = sum(spec.rows.map((r) => r.value));
  const parts = spec.rows.filter((r) => r.value > 0).map((r) => `${r.label} ${r.value}`);
  const text = {
    title: spec.title,
    summary: total === 0 ? `${spec.title}: none.` : `${spec.title}: ${total} in total (${parts.join(', ')}).`,
  };
  const longest = Math.max(0, ...spec.rows.map((r) => [...r.label].length));
  return html`${wideRows(spec, max, longest, text)}${narrowRows(spec, max, text)}`;
}

function wideRows(
  spec: HorizontalBarSpec,
  max: number,
  longest: number,
  text: { title: string; summary: string },
): SafeHtml {
  const rowH = 22;
  const labelW = Math.max(190, labelRoom(longest));
  const height = WIDE.pad.top + spec.rows.length * rowH + 8;
  const plotW = WIDE.width - labelW - 60;
  const rows = spec.rows.map((r, i) => {
    const top = WIDE.pad.top + i * rowH;
    const w = round((r.value / max) * plotW);
    return html`<g
      ><text class="axis" x="2" y="${top + 15}">${r.label}</text
      ><rect class="${r.className ?? 's-bar'}" x="${labelW}" y="${top + 3}" width="${w}" height="${rowH - 6}"
        ><title>${r.label}: ${r.value}</title></rect
      ><text class="axis" x="${labelW + w + 6}" y="${top + 15}">${r.value}</text></g
    >`;
  });
  return chartSvg(WIDE, height, text, html`${rows}`);
}

function narrowRows(
  spec: HorizontalBarSpec,
  max: number,
  text: { title: string; summary: string },
): SafeHtml {
  const rowH = 38;
  const height = NARROW.pad.top + spec.rows.length * rowH;
  const plotW = NARROW.width - 56;
  const rows = spec.rows.map((r, i) => {
    const top = NARROW.pad.top + i * rowH;
    const w = round((r.value / max) * plotW);
    return html`<g
      ><text class="axis" x="2" y="${top + 12}">${r.label}</text
      ><rect class="${r.className ?? 's-bar'}" x="2" y="${top + 18}" width="${w}" height="14"
        ><title>${r.label}: ${r.value}</title></rect
      ><text class="axis" x="${w + 8}" y="${top + 30}">${r.value}</text></g
    >`;
  });
  return chartSvg(NARROW, height, text, html`${rows}`);
}
