import {
  alarmRaised,
  type DeliveryAlarmState,
  describeRun,
  FAILED_ANSWERS,
  judgeSilence,
  noSilence,
} from '../../../domain/delivery-alarm';
import type { OverloadSnapshot } from '../../../domain/answer-first';
import { COUNT_CAP, type HourCount, hourOf } from '../../../domain/console';
import type { DestinationSummary } from '../../../domain/forwarding/admin';
import { stuckCutoffs } from '../../../domain/stuck';
import type { RelaySpoolRow } from '../../../domain/console';
import type { ConsoleDeps } from '../deps';
import { ageOf, countOf, formatAge, formatCount, formatDelay, timeTag } from '../format';
import { html, joinHtml, type SafeHtml } from '../html';
import { hrefWith, page, type PageContext, statusBadge, table } from '../layout';
import { POLLING_OFF_SHORT } from './averbacoes-page';
import { type ChartSeries, stackedBarChart } from '../svg';

/**
 * `/console`: is the service still sending (last delivery, deliveries per hour and per day by
 * outcome, the deactivation and silence alarms), is the receiver keeping up (backlog, lag, dead
 * letters, stale averbações, stuck proposals), and each forwarding destination's state. In cluster
 * mode the figures are the cluster's (PostgreSQL), and a block more shows the relay: the spool
 * backlog and lag of the replica serving the page, and how far each replica's relay got.
 */

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
/** The relay's backlog card turns red once its oldest delivery has waited this long. */
const RELAY_LAG_ALARM_MS = 60_000;

/** The chart's series: the three 200 answers, and every answer the service counts as a failure. */
export const OUTCOME_SERIES: readonly ChartSeries[] = [
  { name: 'accepted', className: 's-accepted' },
  { name: 'duplicate', className: 's-duplicate' },
  { name: 'quarantined', className: 's-quarantined' },
  { name: 'failed', className: 's-failed' },
];

function seriesIndex(outcome: string): number {
  if (Object.hasOwn(FAILED_ANSWERS, outcome)) return 3;
  const i = OUTCOME_SERIES.findIndex((s) => s.name === outcome);
  return i < 0 ? 3 : i;
}

export interface OverviewData {
  now: Date;
  lastDeliveryAt: string | null;
  run: DeliveryAlarmState;
  silence: { raised: boolean; silenceMs: number; inFlight: number | null };
  hours: HourCount[];
  rollupBehind: number;
  events: { pending: number; failed: number; dead: number; oldestUnprocessedAt: string | null };
  averbacoes: { waiting: number; staleWaiting: number };
  stuck: number;
  destinations: DestinationSummary[];
  /** Why registry polls do not run (SERVICE_BASE_URL unset); null while they do. */
  pollingOff: string | null;
  /** Cluster mode's relay figures; null in SQLite mode. */
  relay: RelayData | null;
  /** Answers first (issue 23): this process's deferral of background work; null when not known. */
  overload: OverloadSnapshot | null;
  /** RETENTION_DAYS; null: unset. */
  retentionDays: number | null;
}

export interface RelayData {
  /** This replica's spool (its row among `spools`). */
  spool: string;
  /** Deliveries acknowledged by this replica and not yet in PostgreSQL. */
  backlog: number;
  /** received_at of the oldest of them: the relay lag is its age. */
  oldestReceivedAt: string | null;
  spools: RelaySpoolRow[];
}

export async function loadOverview(d: ConsoleDeps, now: Date): Promise<OverviewData> {
  const f = await d.log.overview(now, {
    stuckCutoffs: stuckCutoffs(d.stuckAfter, now),
    silenceMs: d.silenceMs,
    destinations: d.destinations,
  });
  const last = f.lastDeliveryAt === null ? null : Date.parse(f.lastDeliveryAt);
  const inFlight = f.inFlight;
  const silence =
    last === null
      ? { state: noSilence }
      : judgeSilence(noSilence, {
          now: now.getTime(),
          lastDeliveryAt: last,
          silenceMs: d.silenceMs,
          inFlight,
        });
  const stuck = Object.values(f.stuckByStatus).reduce((a, b) => a + b, 0);
  return {
    now,
    lastDeliveryAt: f.lastDeliveryAt,
    run: f.run,
    silence: { raised: silence.state.raised, silenceMs: d.silenceMs, inFlight },
    hours: f.hours,
    rollupBehind: f.rollup.behind,
    events: f.events,
    averbacoes: f.averbacoes,
    stuck,
    destinations: f.destinations,
    pollingOff: d.registryPolling ? null : POLLING_OFF_SHORT,
    retentionDays: d.retentionDays,
    relay:
      d.relay === undefined
        ? null
        : { spool: d.relay.id, ...backlogOf(d.relay.backlog()), spools: f.relaySpools ?? [] },
    overload: d.overload?.() ?? null,
  };
}

function backlogOf(b: { count: number; oldestReceivedAt: string | null }) {
  return { backlog: b.count, oldestReceivedAt: b.oldestReceivedAt };
}

/** Bars of the last 24 hours and the last 7 days (UTC), oldest first, from the hourly counts. */
export function deliveryBars(hours: readonly HourCount[], now: Date) {
  const byHour = new Map<string, number[]>();
  for (const h of hours) {
    const values = byHour.get(h.hour) ?? [0, 0, 0, 0];
    values[seriesIndex(h.outcome)] = (values[seriesIndex(h.outcome)] ?? 0) + h.n;
    byHour.set(h.hour, values);
  }
  const hourly = Array.from({ length: 24 }, (_, i) => {
    const hour = hourOf(now.getTime() - (23 - i) * HOUR);
    return { label: `${hour.slice(11, 13)}h`, values: byHour.get(hour) ?? [0, 0, 0, 0] };
  });
  const daily = Array.from({ length: 7 }, (_, i) => {
    const day = new Date(now.getTime() - (6 - i) * DAY).toISOString().slice(0, 10);
    const values = [0, 0, 0, 0];
    for (const [hour, v] of byHour)
      if (hour.startsWith(day)) v.forEach((n, k) => (values[k] = (values[k] ?? 0) + n));
    return { label: day.slice(5), values };
  });
  return { hourly, daily };
}

/** "Last 24 hours: accepted 120, duplicate 3, quarantined 0, failed 2" (failed: every non-200 answer). */
function outcomeTotals(bars: readonly { values: readonly number[] }[]): SafeHtml {
  const parts = OUTCOME_SERIES.map(
    (s, i) => `${s.name} ${formatCount(bars.reduce((n, b) => n + (b.values[i] ?? 0), 0))}`,
  );
  return html`<p>Last 24 hours: ${parts.join(', ')} (failed: every answer other than 200).</p>`;
}

function legend(): SafeHtml {
  const items = OUTCOME_SERIES.map((s) => html`<li><span class="swatch sw-${s.name}"></span>${s.name}</li>`);
  return html`<ul class="legend" aria-label="Legend">
    ${items}
  </ul>`;
}

function chartTable(
  caption: string,
  bars: readonly { label: string; values: readonly number[] }[],
): SafeHtml {
  const rows = bars.map(
    (b) =>
      html`<tr>
        <th scope="row">${b.label}</th>
        ${b.values.map((v) => html`<td class="num">${v}</td>`)}
      </tr>`,
  );
  const ths = OUTCOME_SERIES.map((s) => html`<th scope="col" class="num">${s.name}</th>`);
  return html`<details>
    <summary>${caption} as a table</summary>
    <div class="table-wrap" tabindex="0" role="region" aria-label="${caption}">
      <table>
        <caption>
          ${caption}
        </caption>
        <thead>
          <tr>
            <th scope="col">period</th>
            ${ths}
          </tr>
        </thead>
        <tbody>
          ${rows}
        </tbody>
      </table>
    </div>
  </details>`;
}

function sendingCards(data: OverviewData): SafeHtml {
  const { run, silence, now } = data;
  const last = data.lastDeliveryAt;
  const alarm = alarmRaised(run);
  const silenceText =
    silence.silenceMs === 0
      ? 'off (DELIVERY_SILENCE_ALARM_MS=0)'
      : silence.raised
        ? `raised: no delivery for over ${formatAge(silence.silenceMs)} while ${countOf(silence.inFlight ?? 0, 'proposal is', 'proposals are')} in flight`
        : `not raised (threshold ${formatAge(silence.silenceMs)})`;
  return html`<div class="cards">
    <section class="card ${last === null ? 'alarm' : 'fine'}" aria-labelledby="c-last">
      <h2 id="c-last">Last delivery</h2>
      <p class="big">${ageOf(last, now)}</p>
      <p>${timeTag(last)}</p>
    </section>
    <section class="card ${alarm ? 'alarm' : 'fine'}" aria-labelledby="c-deact">
      <h2 id="c-deact">Deactivation alarm</h2>
      <p class="big">${alarm ? 'RAISED' : 'not raised'}</p>
      <p>
        ${countOf(run.consecutive, 'consecutive failed answer')}${run.consecutive > 0 ? html` (${describeRun(run)}), since ${timeTag(run.firstFailureAt === null ? null : new Date(run.firstFailureAt).toISOString())}` : ''}.
        The service deactivates the callback after 3.
      </p>
    </section>
    <section class="card ${silence.raised ? 'alarm' : 'fine'}" aria-labelledby="c-silence">
      <h2 id="c-silence">Silence alarm</h2>
      <p class="big">${silence.raised ? 'RAISED' : 'not raised'}</p>
      <p>${silenceText}</p>
    </section>
  </div>`;
}

/** Stale registrations are the alarm; while polling is off, the card says so and why. */
function averbacoesCard(data: OverviewData): SafeHtml {
  const { averbacoes, pollingOff } = data;
  const waiting =
    pollingOff === null
      ? `${formatCount(averbacoes.waiting)} being polled`
      : `${formatCount(averbacoes.waiting)} waiting for a result`;
  return html`<section
    class="card ${averbacoes.staleWaiting > 0 ? 'alarm' : 'fine'}"
    aria-labelledby="c-averb"
  >
    <h2 id="c-averb">Averbações</h2>
    <p class="big">${formatCount(averbacoes.staleWaiting)} stale</p>
    <p>
      <a href="/console/averbacoes?waiting=yes">${waiting}</a>,
      <a href="/console/averbacoes?stale=yes">stale ones</a>
    </p>
    ${pollingOff === null ? '' : html`<p class="polling-off">${pollingOff}</p>`}
  </section>`;
}

/**
 * Forward deliveries a destination refused for good or that ran out of attempts: an alarm like dead
 * events (the lender is missing those messages until someone replays them). No card when forwarding
 * has never had a destination.
 */
function deadForwardsCard(destinations: readonly DestinationSummary[]): SafeHtml | string {
  if (destinations.length === 0) return '';
  const dead = destinations.filter((s) => s.counts.dead > 0);
  const total = dead.reduce((n, s) => n + s.counts.dead, 0);
  const per = dead.map(
    (s) =>
      html`<a href="${hrefWith('/console/dead', { destination: s.name })}#dead-forwards">${s.name}</a>
        ${formatCount(s.counts.dead)}`,
  );
  return html`<section class="card ${total > 0 ? 'alarm' : 'fine'}" aria-labelledby="c-dead-fwd">
    <h2 id="c-dead-fwd">Dead forward deliveries</h2>
    <p class="big">${formatCount(total)}</p>
    <p>
      ${per.length === 0 ? '' : html`${joinHtml(per, ', ')}. `}<a href="/console/dead#dead-forwards"
        >Review and replay</a
      >
    </p>
  </section>`;
}

function backlogCards(data: OverviewData): SafeHtml {
  const { events, now } = data;
  const lag =
    events.oldestUnprocessedAt === null
      ? 'none waiting'
      : `oldest waiting since ${ageOf(events.oldestUnprocessedAt, now)}`;
  return html`<div class="cards">
    <section class="card" aria-labelledby="c-backlog">
      <h2 id="c-backlog">Pipeline backlog</h2>
      <p class="big">${formatCount(events.pending + events.failed, COUNT_CAP)}</p>
      <p>
        <a href="/console/events?status=pending">${formatCount(events.pending, COUNT_CAP)} pending</a>,
        <a href="/console/events?status=failed">${formatCount(events.failed, COUNT_CAP)} failed</a>
        (retrying). Lag: ${lag}.
      </p>
    </section>
    <section class="card ${events.dead > 0 ? 'alarm' : 'fine'}" aria-labelledby="c-dead">
      <h2 id="c-dead">Dead letters</h2>
      <p class="big">${formatCount(events.dead, COUNT_CAP)}</p>
      <p><a href="/console/dead">Review and replay</a></p>
    </section>
    ${deadForwardsCard(data.destinations)} ${averbacoesCard(data)}
    <section class="card ${data.stuck > 0 ? 'alarm' : 'fine'}" aria-labelledby="c-stuck">
      <h2 id="c-stuck">Stuck proposals</h2>
      <p class="big">${formatCount(data.stuck)}</p>
      <p><a href="/console/proposals?stuck=yes">List them</a> (limits per status: STUCK_AFTER)</p>
    </section>
  </div>`;
}

function destinationsTable(destinations: readonly DestinationSummary[], now: Date): SafeHtml {
  const rows = destinations.map(
    (s) =>
      html`<tr>
        <th scope="row"><a href="/console/forwards">${s.name}</a></th>
        <td class="num">${s.counts.pending}</td>
        <td class="num">${s.counts.retrying}</td>
        <td class="num">${s.counts.dead}</td>
        <td>${ageOf(s.oldest_pending_at, now)}</td>
        <td>${s.paused ? 'paused' : 'running'}</td>
        <td>${statusBadge(s.circuit.state)}</td>
      </tr>`,
  );
  return table(
    'Forwarding destinations',
    ['destination', 'backlog', 'retrying', 'dead', 'oldest waiting', 'state', 'circuit'],
    rows,
    'none configured',
  );
}

/** How long a spool's newest relayed delivery waited for its batch's commit. */
function latestDelay(s: RelaySpoolRow): string {
  if (s.last_received_at === null) return '—';
  return formatDelay(Date.parse(s.last_relayed_at) - Date.parse(s.last_received_at));
}

/** Cluster mode: this replica's relay (its spool's backlog and lag), and every replica's progress. */
function relayBlock(relay: RelayData, now: Date): SafeHtml {
  const lagMs = relay.oldestReceivedAt === null ? 0 : now.getTime() - Date.parse(relay.oldestReceivedAt);
  const state = relay.backlog === 0 ? 'fine' : lagMs >= RELAY_LAG_ALARM_MS ? 'alarm' : '';
  const lag =
    relay.oldestReceivedAt === null
      ? 'none waiting'
      : `oldest waiting since ${ageOf(relay.oldestReceivedAt, now)}`;
  const own = relay.spools.find((s) => s.spool === relay.spool);
  const rows = relay.spools.map(
    (s) =>
      html`<tr>
        <th scope="row">${s.replica}${s.spool === relay.spool ? ' (this replica)' : ''}</th>
        <td><code>${s.spool.slice(0, 8)}</code></td>
        <td class="num">${s.relayed_through}</td>
        <td>${timeTag(s.last_relayed_at)} (${ageOf(s.last_relayed_at, now)})</td>
        <td>${latestDelay(s)}</td>
      </tr>`,
  );
  return html`<div class="cards">
      <section class="card ${state}" aria-labelledby="c-relay">
        <h2 id="c-relay">Relay backlog (this replica)</h2>
        <p class="big">${formatCount(relay.backlog)}</p>
        <p>Deliveries acknowledged here and not yet in PostgreSQL. Relay lag: ${lag}.</p>
      </section>
      <section class="card" aria-labelledby="c-relay-delay">
        <h2 id="c-relay-delay">Relay delay (this replica)</h2>
        <p class="big">${own === undefined ? '—' : latestDelay(own)}</p>
        <p>
          From acknowledgement to PostgreSQL's commit, for the newest delivery of the last
          batch${own === undefined ? ' (nothing relayed yet)' : html`, relayed ${ageOf(own.last_relayed_at, now)}`}.
        </p>
      </section>
    </div>
    ${table('Relay per replica', ['replica', 'spool', 'relayed through', 'last batch', 'latest delay'], rows, 'no replica has relayed yet')}`;
}

// ---- Overload (issue 23: the answer comes first) -------------------------------------------
/** The share of a window spent deferring that turns the card red (the log's warning share). */
const OVERLOAD_ALARM_SHARE = 0.2;

/** This process: whether background work waits for the webhook answers, and how much it waited. */
function overloadBlock(o: OverloadSnapshot): SafeHtml {
  const share = o.windowMs > 0 ? o.deferredMsLastWindow / o.windowMs : 0;
  const state = share >= OVERLOAD_ALARM_SHARE ? 'alarm' : o.deferring ? '' : 'fine';
  const backlog =
    o.backlog === null
      ? 'not read yet'
      : Object.entries(o.backlog)
          .map(([k, v]) => `${k.replace(/_/g, ' ')} ${formatCount(v)}`)
          .join(', ');
  return html`<h2>Overload (this process)</h2>
    <div class="cards">
      <section class="card ${state}" aria-labelledby="c-overload">
        <h2 id="c-overload">Background work deferred</h2>
        <p class="big">${Math.round(share * 100)} %</p>
        <p>
          Of the last ${o.windowMs / 1000} s, the time processing and forwarding waited so that webhook
          answers went first (${o.deferring ? 'waiting now' : 'running now'};
          ${formatCount(Math.round(o.deferredMsTotal / 1000))} s since start). Nothing is dropped: it waits in
          its backlog (${backlog}).
        </p>
      </section>
    </div>`;
}
// ---- end of Overload -------------------------------------------------------------------------

/** Without RETENTION_DAYS, personal data stays for good: said where operators look (issue 45). */
function retentionNote(days: number | null): SafeHtml | string {
  if (days !== null) return '';
  return html`<p class="note retention-off">
    RETENTION_DAYS is not set: the bodies of finished events, delivered messages and the CPF, employer and
    CNPJ of final proposals are kept for good (docs/privacy.md).
  </p>`;
}

export function renderOverview(data: OverviewData, ctx: PageContext): string {
  const { hourly, daily } = deliveryBars(data.hours, data.now);
  const behind =
    data.rollupBehind > 0
      ? html`<p class="note">
          Still counting: ${countOf(data.rollupBehind, 'older delivery is', 'older deliveries are')} not in
          the charts yet (the count catches up at each view).
        </p>`
      : '';
  const body = html`${sendingCards(data)}
    <h2>Deliveries per hour, last 24 hours (UTC)</h2>
    ${outcomeTotals(hourly)}${legend()}${stackedBarChart({ title: 'Deliveries per hour, last 24 hours', unit: 'hour', series: OUTCOME_SERIES, bars: hourly, labelEvery: 3 })}${chartTable('Deliveries per hour', hourly)}
    <h2>Deliveries per day, last 7 days (UTC)</h2>
    ${stackedBarChart({ title: 'Deliveries per day, last 7 days', unit: 'day', series: OUTCOME_SERIES, bars: daily })}${chartTable('Deliveries per day', daily)}${behind}
    <p>
      <a href="/console/deliveries">Every delivery</a> ·
      <a href="/console/deliveries?outcome=invalid_signature">invalid signatures</a> ·
      <a href="/console/deliveries?outcome=storage_unavailable">503s</a>
    </p>
    <h2>Processing</h2>
    ${backlogCards(data)}${retentionNote(data.retentionDays)}${
      data.relay === null
        ? ''
        : html`<h2>Relay (cluster mode)</h2>
            ${relayBlock(data.relay, data.now)}`
    }
    <h2>Forwarding</h2>
    ${destinationsTable(data.destinations, data.now)}${data.overload === null ? '' : overloadBlock(data.overload)}`;
  return page({ title: 'Overview', current: 'overview', ctx, body });
}

export async function overviewPage(d: ConsoleDeps, ctx: PageContext): Promise<string> {
  return renderOverview(await loadOverview(d, ctx.now), ctx);
}
