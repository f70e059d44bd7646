/**
 * The console's one stylesheet, served at /console/assets/console.css (the Content-Security-Policy
 * allows styles from the console's own origin only, no inline style). Colours keep a contrast of at
 * least 4.5:1 for text and 3:1 for chart bars against their background (WCAG 2.1 AA); focus is
 * always visible; the layout is one column on a phone, where a table's rows become cards (each cell
 * a "label: value" line, the label from its `data-label`) and each chart shows its narrow drawing.
 */
export const CONSOLE_CSS = `
:root { --fg: #1a1a1a; --muted: #4a4a4a; --bg: #ffffff; --panel: #f4f5f7; --line: #c8ccd2; --link: #0b57b5;
  --focus: #b35900; --ok: #1d6b36; --warn: #8a5300; --bad: #b3261e; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
a { color: var(--link); }
a:focus-visible, button:focus-visible, input:focus-visible, select:focus-visible, summary:focus-visible, [tabindex]:focus-visible {
  outline: 3px solid var(--focus); outline-offset: 2px; }
.skip-link { position: absolute; left: -9999px; top: 0; background: var(--bg); padding: .5rem 1rem; z-index: 10; }
.skip-link:focus { left: .5rem; }
header.top { display: flex; flex-wrap: wrap; align-items: center; gap: .5rem 1.5rem; padding: .5rem 1rem; background: var(--panel); border-bottom: 1px solid var(--line); }
.brand { margin: 0; font-weight: 700; }
.brand a { color: var(--fg); text-decoration: none; }
ul.nav { display: flex; flex-wrap: wrap; gap: .25rem 1rem; list-style: none; margin: 0; padding: 0; }
ul.nav a[aria-current="page"] { font-weight: 700; color: var(--fg); text-decoration-thickness: 3px; }
.who { margin-left: auto; display: flex; align-items: center; gap: .5rem; color: var(--muted); }
main { padding: 1rem; max-width: 80rem; }
main:focus { outline: none; }
h1 { font-size: 1.5rem; margin: .25rem 0 1rem; }
h2 { font-size: 1.15rem; margin: 1.5rem 0 .5rem; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(14rem, 1fr)); gap: .75rem; }
.card { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: .75rem; }
.card h2 { margin: 0 0 .25rem; font-size: 1rem; }
.card .big { font-size: 1.6rem; font-weight: 700; margin: 0; }
.alarm { border-left: 6px solid var(--bad); }
.fine { border-left: 6px solid var(--ok); }
.note, .empty { color: var(--muted); }
.error-box { border: 2px solid var(--bad); padding: .75rem; border-radius: 6px; }
form.filters { display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: flex-end; background: var(--panel); padding: .75rem; border-radius: 6px; margin-bottom: 1rem; }
.field { display: flex; flex-direction: column; gap: .2rem; min-width: 10rem; }
.field.wide { flex: 1 1 20rem; }
.field small { color: var(--muted); }
.field.actions { flex-direction: row; align-items: center; gap: .75rem; min-width: auto; }
input, select, button { font: inherit; padding: .35rem .5rem; border: 1px solid #6b7280; border-radius: 4px; background: var(--bg); color: var(--fg); }
button { background: #0b57b5; color: #fff; border-color: #0b57b5; cursor: pointer; }
a.button { display: inline-block; padding: .35rem .75rem; border-radius: 4px; background: #0b57b5; color: #fff; text-decoration: none; }
form.inline { display: inline; }
.table-wrap { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; margin: .5rem 0 1rem; }
caption { text-align: left; font-weight: 600; padding: .25rem 0; }
th, td { text-align: left; padding: .35rem .5rem; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: var(--panel); }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.status { display: inline-block; padding: 0 .4rem; border-radius: 3px; border: 1px solid currentColor; font-size: .85rem; }
.status-done, .status-delivered, .status-completed, .status-accepted { color: var(--ok); }
.status-pending, .status-queued, .status-processing, .status-failed, .status-retrying { color: var(--warn); }
.status-dead, .status-error, .status-invalid { color: var(--bad); }
.status-ignored, .status-other { color: var(--muted); }
pre.body { background: var(--panel); padding: .75rem; overflow-x: auto; border-radius: 6px; max-height: 40rem; }
ol.timeline { list-style: none; padding: 0; border-left: 3px solid var(--line); margin-left: .5rem; }
ol.timeline li { position: relative; padding: .35rem 0 .6rem 1rem; }
ol.timeline li::before { content: ""; position: absolute; left: -.5rem; top: .75rem; width: .7rem; height: .7rem; border-radius: 50%; background: var(--muted); }
ol.timeline li[data-kind="transition"]::before { background: var(--ok); }
ol.timeline li[data-kind="duplicate"]::before { background: var(--warn); }
ol.timeline li[data-kind="forward"]::before { background: var(--link); }
ol.timeline .late { color: var(--warn); font-weight: 600; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; }
.chart { width: 100%; height: auto; max-width: 48rem; display: block; }
.chart-narrow { display: none; }
.chart .grid { stroke: var(--line); stroke-width: 1; }
.chart .axis { fill: var(--muted); font-size: 12px; }
details.filters-box { margin-bottom: 1rem; }
details.filters-box > summary { cursor: pointer; padding: .35rem 0; font-weight: 600; }
details.filters-box form.filters { margin: .25rem 0 0; }
.polling-off { font-weight: 600; }
.s-accepted { fill: #1f5fa8; } .s-duplicate { fill: #6b6f76; } .s-quarantined { fill: #9a6400; } .s-failed { fill: #c0352b; }
.s-bar { fill: #1f5fa8; } .s-final { fill: #6b6f76; }
.legend { display: flex; flex-wrap: wrap; gap: .25rem 1rem; list-style: none; padding: 0; margin: .25rem 0; }
.legend .swatch { display: inline-block; width: .8rem; height: .8rem; margin-right: .3rem; vertical-align: middle; }
.legend .sw-accepted { background: #1f5fa8; } .legend .sw-duplicate { background: #6b6f76; } .legend .sw-quarantined { background: #9a6400; } .legend .sw-failed { background: #c0352b; }
.pager { margin: 1rem 0; }
@media (max-width: 40rem) {
  header.top { flex-direction: column; align-items: flex-start; }
  .who { margin-left: 0; }
  main { padding: .75rem; }
  th, td { padding: .3rem; font-size: .9rem; }
  dl.facts { grid-template-columns: minmax(0, 1fr); }
  dl.facts dd { margin-bottom: .35rem; overflow-wrap: anywhere; }
  .table-wrap.cards { overflow-x: visible; }
  .cards table, .cards tbody, .cards tr { display: block; }
  .cards caption { display: block; }
  .cards thead { position: absolute; width: 1px; height: 1px; overflow: hidden; clip-path: inset(50%); white-space: nowrap; }
  .cards tbody tr { border: 1px solid var(--line); border-radius: 6px; margin: 0 0 .6rem; padding: .3rem .5rem; }
  .cards tbody td, .cards tbody th { display: block; position: relative; min-height: 1.6rem; padding: .15rem 0 .15rem 8.5rem; border: 0; text-align: left; overflow-wrap: anywhere; background: none; }
  .cards tbody td::before, .cards tbody th::before { content: attr(data-label); position: absolute; left: 0; top: .15rem; width: 8rem; font-weight: 600; color: var(--muted); overflow-wrap: anywhere; }
  .cards tbody td:empty { display: none; }
}
@media (max-width: 48rem) {
  .chart-wide { display: none; }
  .chart-narrow { display: block; max-width: 28rem; }
  .chart-narrow .axis { font-size: 13px; }
}
`;

/**
 * The console's icon, served at /console/assets/favicon.svg and declared by every page (otherwise a
 * browser asks for /favicon.ico, gets a 404 and logs an error on each page).
 */
export const FAVICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#0b57b5"/><path d="M4 8.5l2.5 2.5L12 5.5" fill="none" stroke="#fff" stroke-width="2"/></svg>`;
