import {
  type ForwardLatencyResult,
  type ForwardThroughputResult,
  prepareForwardBacklog,
  runForwardingLatency,
  runForwardingThroughput,
} from './forwarding';
import type { ForwardingHarness } from './protocol';
import { type ClusterFigures, drainBuilds, runClusterFigures } from './cluster';
import type { ClusterBenchOptions, ClusterHarness } from './protocol';
import { fixed, median, medianBy } from '../rigs/harness';
import { spawnSync } from 'node:child_process';
import { availableParallelism, loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import type { Options } from './run-options';

/**
 * The figures run.ts prints beside the HTTP rows: this build against --baseline's where a figure
 * is not an HTTP row, the cluster section, and the forwarding throughput and latency.
 */

// ---------------------------------------------------------------------------------------------
// This build against --baseline's where a figure is not an HTTP row: the pipeline drain and
// cluster mode's processing (row 3), alternating builds, in the same run (issue 24).

export interface AbFigure {
  what: string;
  unit: string;
  /** Each build's figure, round by round. */
  runs: { build: number[]; baseline: number[] };
}

export function abReport(f: AbFigure, rev: string): string {
  const list = (xs: number[]) => xs.map((x) => Math.round(x)).join(' / ');
  const ratio = median(f.runs.build) / median(f.runs.baseline);
  return (
    `${f.what}, this build against ${rev}, alternating: this build ${list(f.runs.build)} ${f.unit}, ` +
    `baseline ${list(f.runs.baseline)} ${f.unit}\n` +
    `  this build / baseline (medians) ${fixed(ratio, 2)}×   (target ≥ 1.00× within noise)`
  );
}

/**
 * The pipeline drain (bench/pipeline-drain.ts) of each build, in a child process of its own pinned
 * to core 0 (when taskset is here), the builds alternating, `rounds` each.
 */
export function pipelineAgainst(
  baselineBin: string,
  events: number,
  rounds: number,
  errors: string[],
): AbFigure {
  const scripts = {
    build: join(__dirname, 'pipeline-drain.js'),
    baseline: resolve(baselineBin, '..', '..', '..', 'bench', 'pipeline-drain.js'),
  };
  const pin = spawnSync('taskset', ['-c', '0', 'true']).status === 0 ? ['taskset', '-c', '0'] : [];
  const runs = { build: [] as number[], baseline: [] as number[] };
  for (let round = 1; round <= rounds; round++)
    for (const which of ['build', 'baseline'] as const) {
      process.stderr.write(`bench: pipeline drain, ${which}, round ${round} ...`);
      const argv = [...pin, process.execPath, scripts[which], String(events)];
      const r = spawnSync(argv[0] as string, argv.slice(1), { encoding: 'utf8' });
      const rate = /= (\d+) events\/s/.exec(r.stdout ?? '')?.[1];
      if (r.status !== 0 || rate === undefined) {
        errors.push(`pipeline drain (${which}): exit ${r.status}; ${(r.stdout + r.stderr).slice(-500)}`);
        continue;
      }
      process.stderr.write(` ${rate} events/s\n`);
      runs[which].push(Number(rate));
    }
  return { what: `pipeline drain of ${events} stored events`, unit: 'events/s', runs };
}

/** Cluster mode's processing (row 3, bench/cluster.ts `drainBuilds`) of each build, ABBA. */
export async function clusterDrainAgainst(
  h: ClusterHarness,
  baselineBin: string,
  options: Options,
  errors: string[],
): Promise<AbFigure> {
  const concurrency = options.clusterConcurrencies[0] ?? 4;
  const results = await drainBuilds(
    h,
    {
      builds: [
        { label: 'build', bin: join(__dirname, '..', 'src', 'cli', 'bin.js') },
        { label: 'baseline', bin: baselineBin },
      ],
      events: options.clusterEvents,
      concurrency,
      runs: Math.max(2, options.clusterRounds),
    },
    (line) => process.stderr.write(`bench: cluster processing ${line}\n`),
  );
  const of = (label: string) => results.get(label) ?? { eventsPerSecond: [], ok: false };
  for (const label of ['build', 'baseline'])
    if (!of(label).ok)
      errors.push(`cluster processing (${label}): a drain did not process every event in order`);
  return {
    what: `cluster processing of ${options.clusterEvents} events, CLUSTER_CONCURRENCY=${concurrency}`,
    unit: 'events/s',
    runs: { build: of('build').eventsPerSecond, baseline: of('baseline').eventsPerSecond },
  };
}

// ---------------------------------------------------------------------------------------------
// Cluster figures (issue 13): bench/cluster.ts

export async function runClusterSection(
  h: ClusterHarness,
  options: Options,
  errors: string[],
): Promise<{ figures: ClusterFigures; options: ClusterBenchOptions } | null> {
  const clusterOptions: ClusterBenchOptions = {
    rounds: options.clusterRounds,
    shareCores: options.clusterShareCores,
    concurrency: 50,
    warmupMs: options.warmupMs,
    durationMs: options.durationMs,
    rate: options.clusterRate,
    rateMs: options.clusterLatencyMs,
    drainEvents: options.clusterEvents,
    drainConcurrencies: options.clusterConcurrencies,
    log: (text) => process.stderr.write(text),
  };
  try {
    const figures = await runClusterFigures(h, clusterOptions, errors);
    return { figures, options: clusterOptions };
  } catch (err) {
    // No PostgreSQL binaries, or a run that failed: the other sections' figures still print.
    errors.push(`cluster: ${err instanceof Error ? err.message : String(err)}`);
    process.stderr.write('\n');
    return null;
  }
}

// ---------------------------------------------------------------------------------------------
// Forwarding figures (issue 11): throughput from a stored backlog, latency from 200 to destination

export interface ForwardingFigures {
  /** This build's round with the median CPU per message. */
  throughput: ForwardThroughputResult;
  /** The same for the --baseline build (null without one). */
  baseline: ForwardThroughputResult | null;
  /** CPU per message of every round, per build. */
  cpuRounds: Record<string, string>;
  latency: ForwardLatencyResult;
  /** The machine's 1-minute load average after each figure, and its cores: is the figure the code's or the neighbours'? */
  loadAfter: { throughput: number; latency: number; cores: number };
}

/** Issue 23's target for the throughput figure's receiver CPU per message, µs. */
const FORWARD_CPU_TARGET_US = 200;

/** Target of the throughput figure, messages/s to one local destination. */
const FORWARD_TARGET_RATE = 2000;

export async function runForwardingFigures(
  h: ForwardingHarness,
  options: Options,
  errors: string[],
): Promise<ForwardingFigures> {
  process.stderr.write(`bench: forwarding backlog of ${options.forwardBacklog} messages ...`);
  const backlog = await prepareForwardBacklog(h, options.forwardBacklog);
  process.stderr.write(` stored\n`);
  const baselineBin = options.targets.find((t) => t.name === 'receiver-baseline')?.bin;
  const runs: { name: string; bin?: string }[] = [{ name: 'receiver' }];
  if (baselineBin !== undefined) runs.push({ name: 'baseline', bin: baselineBin });
  const rounds = new Map<string, ForwardThroughputResult[]>(runs.map((r) => [r.name, []]));
  for (let round = 1; round <= options.forwardRounds; round++)
    for (const run of runs) {
      process.stderr.write(`bench: forwarding throughput, ${run.name}, round ${round} ...`);
      const result = await runForwardingThroughput(h, backlog, { ...run, name: `${run.name}-${round}` });
      process.stderr.write(
        ` ${Math.round(result.messagesPerSecond)} messages/s, ${fixed(result.cpuUsPerMessage, 0)} µs/message\n`,
      );
      rounds.get(run.name)?.push(result);
    }
  const throughput = medianByCpu(rounds.get('receiver') ?? []);
  const baselineRounds = rounds.get('baseline');
  const baseline = baselineRounds === undefined ? null : medianByCpu(baselineRounds);
  const loadThroughput = loadavg()[0] as number;
  const t = throughput;
  const d = t.destination;
  if (d.unique !== t.messages || t.delivered !== t.messages || t.pending !== 0 || t.dead !== 0)
    errors.push(
      `forwarding throughput: ${t.messages} messages in the backlog, ${d.unique} distinct ones reached the ` +
        `destination; recorded delivered ${t.delivered}, pending ${t.pending}, dead ${t.dead}`,
    );
  if (t.orderViolations > 0)
    errors.push(`forwarding throughput: ${t.orderViolations} arrivals out of proposal order`);
  const seconds = (ms: number) => `${ms / 1000} s`;
  process.stderr.write(
    `bench: forwarding latency, ${options.forwardRate} deliveries/s for ${seconds(options.forwardLatencyMs)} ...`,
  );
  const latency = await runForwardingLatency(h, {
    rate: options.forwardRate,
    warmupMs: options.warmupMs,
    durationMs: options.forwardLatencyMs,
  });
  process.stderr.write(` p50 ${fixed(latency.p50Ms, 1)} ms, p99 ${fixed(latency.p99Ms, 1)} ms\n`);
  const loadAfter = {
    throughput: loadThroughput,
    latency: loadavg()[0] as number,
    cores: availableParallelism(),
  };
  const l = latency;
  if (l.ok200 !== l.sent || l.arrived !== l.ok200)
    errors.push(
      `forwarding latency: ${l.sent} deliveries sent, ${l.ok200} answered 200 (${l.non200} other, ` +
        `${l.socketErrors} socket errors), ${l.arrived} of their event.received reached the destination`,
    );
  if (l.destination.unique !== l.messagesExpected || l.delivered !== l.messagesExpected)
    errors.push(
      `forwarding latency: ${l.messagesExpected} messages expected, ${l.destination.unique} distinct ones ` +
        `reached the destination, ${l.delivered} of ${l.deliveries} deliveries recorded delivered`,
    );
  for (const [name, r] of [
    ['throughput', t.destination],
    ['latency', l.destination],
  ] as const)
    if (r.badSignatures > 0 || r.missingHeaders > 0)
      errors.push(
        `forwarding ${name}: ${r.badSignatures} bad signatures of ${r.verified} checked, ${r.missingHeaders} ` +
          `requests without the Standard Webhooks headers; e.g. ${r.errorSamples.join(' | ')}`,
      );
  return { throughput, baseline, cpuRounds: cpuRounds(rounds), latency, loadAfter };
}

/** The round whose CPU per message is the median (the first round off Linux). */
function medianByCpu(results: ForwardThroughputResult[]): ForwardThroughputResult {
  const m = medianBy(results, (r) => r.cpuUsPerMessage ?? 0);
  if (m === undefined) throw new Error('forwarding throughput: no round ran');
  return m;
}

/** Each build's CPU per message, round by round, as printed: `162 / 171 / 158`. */
function cpuRounds(rounds: Map<string, ForwardThroughputResult[]>): Record<string, string> {
  return Object.fromEntries(
    [...rounds].map(([name, results]) => [
      name,
      results
        .map((r) => `${fixed(r.cpuUsPerMessage, 0)} (warm ${fixed(r.warmCpuUsPerMessage, 0)})`)
        .join(' / '),
    ]),
  );
}

export function forwardingReport({
  throughput: t,
  baseline: b,
  cpuRounds,
  latency: l,
  loadAfter: load,
}: ForwardingFigures): string {
  const met = (ok: boolean) => (ok ? 'MET' : 'MISSED');
  const d = t.destination;
  const types = Object.entries(l.destination.types)
    .map(([type, n]) => `${n} ${type}`)
    .join(', ');
  const latencyMet = l.p50Ms <= 20 && l.p99Ms <= 200 && l.arrived === l.sent;
  return [
    `forwarding throughput: ${t.messages} pending messages (event.received + proposal.changed of ${t.events} events, ` +
      `${t.proposals} proposals interleaved; written by the receiver's pipeline at ${fixed(t.events / t.outboxSeconds, 0)} events/s), ` +
      `sent by \`serve\` to one local destination answering 200 at once${t.pinned ? ' (the receiver pinned to core 0, the destination to the others)' : ''}`,
    `  ${d.unique} distinct messages arrived (${d.received} requests) in ${t.sendSeconds.toFixed(2)} s from first to last = ` +
      `${Math.round(t.messagesPerSecond)} messages/s = ${(t.messagesPerSecond / FORWARD_TARGET_RATE).toFixed(2)}× the ${FORWARD_TARGET_RATE} target; ` +
      `receiver CPU ${fixed(t.cpuUsPerMessage, 0)} µs/message; load average ${load.throughput.toFixed(1)} on ${load.cores} cores`,
    `  recorded: ${t.delivered} delivered, ${t.pending} pending, ${t.dead} dead, ${t.attempts} attempts; ` +
      `${t.orderViolations} arrivals out of proposal order; signatures ${d.verified - d.badSignatures}/${d.verified} verified (standardwebhooks)`,
    `  receiver CPU per message, each round: ${Object.entries(cpuRounds)
      .map(([name, cpu]) => `${name} ${cpu} µs`)
      .join('; ')}` +
      (b === null
        ? ''
        : `; baseline (median round) ${Math.round(b.messagesPerSecond)} messages/s, ${fixed(b.cpuUsPerMessage, 0)} µs/message, ` +
          `this build / baseline CPU ${fixed(t.cpuUsPerMessage !== null && b.cpuUsPerMessage !== null ? t.cpuUsPerMessage / b.cpuUsPerMessage : null, 2)}×`),
    `target "forwarding ≥ ${FORWARD_TARGET_RATE} messages/s to one destination": ${met(t.messagesPerSecond >= FORWARD_TARGET_RATE)}`,
    `target "receiver CPU ≤ ${FORWARD_CPU_TARGET_US} µs per forwarded message" (issue 23): ${met(t.cpuUsPerMessage !== null && t.cpuUsPerMessage <= FORWARD_CPU_TARGET_US)}`,
    '',
    `forwarding latency: ${l.rate} signed deliveries/s open-loop for ${l.durationMs / 1000} s (4 events per proposal, ` +
      `50 proposals interleaved), each 200 → its event.received at the destination (one clock)`,
    `  p50 ${fixed(l.p50Ms, 2)} ms, p99 ${fixed(l.p99Ms, 2)} ms, max ${fixed(l.maxMs, 1)} ms, min ${fixed(l.minMs, 2)} ms ` +
      `over ${l.arrived}/${l.sent} deliveries (${l.ok200} answered 200); webhook answer p50 ${fixed(l.answerP50Ms, 2)} ms, ` +
      `p99 ${fixed(l.answerP99Ms, 2)} ms; sender lag ≤ ${l.maxLagMs.toFixed(1)} ms; receiver CPU ${fixed(l.cpuUsPerDelivery, 0)} µs/delivery; ` +
      `load average ${load.latency.toFixed(1)} on ${load.cores} cores`,
    `  destination: ${types || 'nothing'}; recorded ${l.delivered}/${l.deliveries} deliveries delivered; ` +
      `${l.destination.unique}/${l.messagesExpected} expected messages arrived; ` +
      `signatures ${l.destination.verified - l.destination.badSignatures}/${l.destination.verified} verified`,
    `target "forwarding latency p50 ≤ 20 ms, p99 ≤ 200 ms at ${l.rate}/s": ${met(latencyMet)}`,
  ].join('\n');
}
