import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parse, parseAllDocuments } from 'yaml';
import { loadConfig } from '../../src/config';
import { tempDir } from '../helpers/tmp';

/**
 * deploy/kubernetes/, the package a lender deploys (issue 46 item 6):
 *
 * - every manifest is valid against the Kubernetes API schemas (and the Prometheus Operator's for
 *   the ServiceMonitor and PrometheusRule), with no field they do not know:
 *   scripts/validate-kubernetes.mjs, in a child process because those models are ES modules only;
 *   broken copies are refused, naming the field;
 * - the PrometheusRule is what scripts/gen-prometheus-rule.js makes of deploy/prometheus/alerts.yml
 *   today, whatever alerts.yml says, and its `spec` is alerts.yml;
 * - what the manifests' comments argue, one checker each: the spool on a claim, never an emptyDir;
 *   the probes; the grace period above the drain; non-root on a read-only root; secrets only from
 *   the Secret, whose example cannot start a replica; resources above the measured figures; the
 *   migrate Job on the StatefulSet's image. Each checker is also run on a copy broken the way it
 *   guards against, and must complain: none of them can pass by reading nothing.
 */

const root = join(__dirname, '..', '..');
const DIR = join(root, 'deploy', 'kubernetes');
const read = (path: string): string => readFileSync(join(root, path), 'utf8');

/* eslint-disable @typescript-eslint/no-explicit-any -- manifests are untyped YAML, read by path */
type Obj = any;

/** Every object of every manifest of deploy/kubernetes/, parsed as Kubernetes does (YAML 1.1). */
function manifests(): Obj[] {
  return readdirSync(DIR)
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .flatMap((f) =>
      parseAllDocuments(readFileSync(join(DIR, f), 'utf8'), { version: '1.1' })
        .map((d) => d.toJS() as Obj)
        .filter((o) => o !== null),
    );
}

const all = manifests();
function the(kind: string, name?: string): Obj {
  const found = all.filter((o) => o.kind === kind && (name === undefined || o.metadata?.name === name));
  if (found.length !== 1) throw new Error(`expected one ${kind} ${name ?? ''}, found ${found.length}`);
  return structuredClone(found[0]);
}

// ---- the schemas --------------------------------------------------------------------------------

interface Result {
  file: string;
  document: number;
  kind: string | null;
  name: string | null;
  error: string | null;
}

function validate(...files: string[]): Result[] {
  const run = spawnSync(
    process.execPath,
    [join(root, 'scripts', 'validate-kubernetes.mjs'), '--json', ...files],
    {
      cwd: root,
      encoding: 'utf8',
      timeout: 60_000,
    },
  );
  if (run.error) throw run.error;
  try {
    return JSON.parse(run.stdout) as Result[];
  } catch {
    throw new Error(`validate-kubernetes.mjs printed no JSON (exit ${run.status}): ${run.stderr}`);
  }
}

describe('deploy/kubernetes against the Kubernetes API schemas', () => {
  it('validates every object of every manifest', () => {
    const results = validate();
    expect(results.filter((r) => r.error !== null)).toEqual([]);
    expect(results.map((r) => r.kind).sort()).toEqual([
      'Job',
      'PodDisruptionBudget',
      'PrometheusRule',
      'Secret',
      'Service',
      'Service',
      'ServiceMonitor',
      'StatefulSet',
    ]);
  });

  it('refuses broken objects, naming the field', () => {
    const { dir, cleanup } = tempDir('consig-k8s-');
    try {
      // [file, how it is broken, what the validator must say]
      const broken: [string, (text: string) => string, RegExp][] = [
        [
          'statefulset.yaml', // no pod template
          (t) => t.replace(/^ {2}template:\n(?: {4}.*\n|\n)+/m, ''),
          /spec must have required property template/,
        ],
        [
          'statefulset.yaml', // an env value that is a number
          (t) => t.replace("value: '10000'", 'value: 10000'),
          /env\/\d+\/value must be string/,
        ],
        [
          'statefulset.yaml', // a YAML 1.1 boolean where a string is wanted
          (t) => t.replace('value: info', 'value: on'),
          /env\/\d+\/value must be string/,
        ],
        [
          'statefulset.yaml', // a memory limit in no unit Kubernetes knows
          (t) => t.replace('memory: 512Mi', 'memory: 512 MB'),
          /limits\/memory must match format "quantity"/,
        ],
        [
          'statefulset.yaml', // a misspelt field, which no schema forbids
          (t) => t.replace('readinessProbe:', 'readinesProbe:'),
          /'"readinesProbe"' does not exist in type 'IContainer'/,
        ],
        [
          'services.yaml', // the same in the second document of a file
          (t) => t.replace('publishNotReadyAddresses:', 'publishNotReady:'),
          /'"publishNotReady"' does not exist in type 'IServiceSpec'/,
        ],
        [
          'pdb.yaml', // a kind with no schema
          (t) => t.replace('kind: PodDisruptionBudget', 'kind: PodDisruptionBudgetX'),
          /no schema known for apiVersion policy\/v1 kind PodDisruptionBudgetX/,
        ],
        [
          'prometheusrule.yaml', // a rule's `for` Prometheus cannot read
          (t) => t.replace(/for: (\d+)m/, 'for: $1 minutes'),
          /rules\/\d+\/for must match pattern/,
        ],
        [
          'servicemonitor.yaml', // a scrape interval with a space
          (t) => t.replace('interval: 15s', 'interval: 15 s'),
          /endpoints\/0\/interval must match pattern/,
        ],
      ];
      const files = broken.map(([file, edit], i) => {
        const text = readFileSync(join(DIR, file), 'utf8');
        const changed = edit(text);
        expect(changed).not.toBe(text);
        const path = join(dir, `${i}-${file}`);
        writeFileSync(path, changed);
        return path;
      });
      const results = validate(...files);
      broken.forEach(([file, , error], i) => {
        const refused = results.filter((r) => r.file.endsWith(`${i}-${file}`) && r.error !== null);
        expect(refused).toHaveLength(1);
        expect(refused[0]!.error).toMatch(error);
      });
    } finally {
      cleanup();
    }
  });
});

// ---- the PrometheusRule, generated from alerts.yml ---------------------------------------------

describe('prometheusrule.yaml', () => {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- the generator is plain CommonJS, run with node
  const { render } = require('../../scripts/gen-prometheus-rule.js') as { render: (text: string) => string };
  const alerts = read('deploy/prometheus/alerts.yml');

  it('is what scripts/gen-prometheus-rule.js makes of deploy/prometheus/alerts.yml now', () => {
    // If this fails after a change to alerts.yml: node scripts/gen-prometheus-rule.js
    expect(read('deploy/kubernetes/prometheusrule.yaml')).toBe(render(alerts));
  });

  it('has alerts.yml, parsed, as its spec', () => {
    const rule = the('PrometheusRule');
    expect(rule.spec).toEqual(parse(alerts));
    expect(rule.spec.groups.flatMap((g: Obj) => g.rules).length).toBeGreaterThan(10);
  });

  it('keeps the meaning of block scalars and comments when indenting', () => {
    const text =
      'groups:\n  - name: g\n    rules:\n      # a comment\n      - alert: A\n        expr: |\n          up\n\n            == 0\n';
    const spec = parse(render(`# preamble\n\n${text}`)).spec;
    expect(spec).toEqual(parse(text));
    expect(() => render('# only a comment\n')).toThrow(/has no rules/);
  });
});

// ---- what the comments argue ------------------------------------------------------------------

const podSpec = (workload: Obj): Obj => workload.spec.template.spec;
const containers = (workload: Obj): Obj[] => podSpec(workload).containers;
const envOf = (container: Obj, name: string): Obj => (container.env ?? []).find((e: Obj) => e.name === name);

/** The spool (DATABASE_PATH's directory) is on a volumeClaimTemplate, and nothing else is mounted there. */
function spoolProblems(sts: Obj): string[] {
  const out: string[] = [];
  const [container] = containers(sts);
  const path = envOf(container, 'DATABASE_PATH')?.value;
  if (typeof path !== 'string') return ['DATABASE_PATH is not set to a path'];
  const mount = (container.volumeMounts ?? []).find((m: Obj) => m.mountPath === dirname(path));
  if (!mount) return [`nothing is mounted at ${dirname(path)}, the spool's directory`];
  const claims = (sts.spec.volumeClaimTemplates ?? []).map((c: Obj) => c.metadata.name);
  if (!claims.includes(mount.name))
    out.push(`the spool's volume "${mount.name}" is not a volumeClaimTemplate`);
  const podVolume = (podSpec(sts).volumes ?? []).find((v: Obj) => v.name === mount.name);
  if (podVolume)
    out.push(`the spool's volume "${mount.name}" is a pod volume (${Object.keys(podVolume).join(', ')})`);
  const policy = sts.spec.persistentVolumeClaimRetentionPolicy ?? {};
  for (const when of ['whenDeleted', 'whenScaled'])
    if ((policy[when] ?? 'Retain') !== 'Retain') out.push(`the spool's claims are deleted ${when}`);
  return out;
}

function probeProblems(sts: Obj): string[] {
  const out: string[] = [];
  const [container] = containers(sts);
  const ports = (container.ports ?? []).map((p: Obj) => [p.name, p.containerPort]).flat();
  const probe = (name: string, path: string | null) => {
    const p = container[name];
    if (!p) return out.push(`no ${name}`);
    if (p.httpGet?.path !== path) out.push(`${name} on ${p.httpGet?.path}, not ${path}`);
    if (!ports.includes(p.httpGet?.port)) out.push(`${name} on port ${p.httpGet?.port}, not the container's`);
    return p;
  };
  probe('readinessProbe', '/readyz');
  const live = probe('livenessProbe', '/healthz');
  if (container.startupProbe) probe('startupProbe', '/healthz');
  if (live) {
    // Defaults as Kubernetes' (period 10, timeout 1, failureThreshold 3).
    const period = live.periodSeconds ?? 10;
    const timeout = live.timeoutSeconds ?? 1;
    const tolerated = ((live.failureThreshold ?? 3) - 1) * period + timeout;
    if (tolerated < 30) out.push(`liveness restarts a replica that missed ${tolerated} s of checks (< 30 s)`);
    if (timeout < 2) out.push(`liveness gives a check ${timeout} s (< 2 s)`);
  }
  return out;
}

/** preStop sleep + SHUTDOWN_TIMEOUT_MS × 3 + PG_LOCK_TIMEOUT_MS + 2 s of traces (statefulset.yaml's arithmetic). */
function drainSeconds(sts: Obj): number {
  const [container] = containers(sts);
  const env: Record<string, string> = {};
  for (const e of container.env ?? []) if (typeof e.value === 'string') env[e.name] = e.value;
  const config = loadConfig(env);
  const command: string[] = container.lifecycle?.preStop?.exec?.command ?? [];
  const preStop =
    command[0] === 'sleep' ? Number(command[1]) : (container.lifecycle?.preStop?.sleep?.seconds ?? 0);
  const lockMs =
    config.cluster?.limits.lockTimeoutMs ??
    loadConfig({ DATABASE_URL: 'postgres://h/d' }).cluster!.limits.lockTimeoutMs;
  return preStop + (3 * config.shutdownTimeoutMs + lockMs + 2000) / 1000;
}

function graceProblems(sts: Obj): string[] {
  const grace = podSpec(sts).terminationGracePeriodSeconds ?? 30;
  const drain = drainSeconds(sts);
  return grace > drain ? [] : [`terminationGracePeriodSeconds ${grace} is not above the drain, ${drain} s`];
}

function securityProblems(workload: Obj): string[] {
  const out: string[] = [];
  const pod = podSpec(workload).securityContext ?? {};
  if (pod.runAsNonRoot !== true) out.push('pod: runAsNonRoot is not true');
  if (pod.runAsUser === 0) out.push('pod: runAsUser is 0');
  for (const c of containers(workload)) {
    const s = c.securityContext ?? {};
    if (s.readOnlyRootFilesystem !== true) out.push(`${c.name}: readOnlyRootFilesystem is not true`);
    if (s.allowPrivilegeEscalation !== false) out.push(`${c.name}: allowPrivilegeEscalation is not false`);
    if (!(s.capabilities?.drop ?? []).includes('ALL')) out.push(`${c.name}: capabilities are not dropped`);
    if (s.runAsUser === 0 || s.privileged === true) out.push(`${c.name}: runs as root or privileged`);
  }
  return out;
}

/** Settings that hold a secret (docs/configuration.md): never a `value` in a manifest. */
const SECRET_SETTINGS =
  /^(WEBHOOK_SECRETS?|DATABASE_URL|ADMIN_TOKEN|VIEWER_TOKEN|SERVICE_ACCESS_TOKEN|SERVICE_CLIENT_SECRET|SERVICE_API_KEY|FORWARD_SECRET|OIDC_CLIENT_SECRET|OTEL_EXPORTER_OTLP(_TRACES)?_HEADERS)$/;

function secretProblems(workload: Obj, required: string[]): string[] {
  const out: string[] = [];
  for (const c of containers(workload)) {
    for (const e of c.env ?? []) {
      if (SECRET_SETTINGS.test(e.name) && (e.value !== undefined || !e.valueFrom?.secretKeyRef))
        out.push(`${c.name}: ${e.name} is not from a Secret`);
      if (typeof e.value === 'string' && /:\/\/[^/\s:@]+:[^@\s]+@/.test(e.value))
        out.push(`${c.name}: ${e.name} holds a URL with a password`);
    }
    for (const name of required)
      if (!envOf(c, name)?.valueFrom?.secretKeyRef)
        out.push(`${c.name}: ${name} is missing or not from a Secret`);
  }
  return out;
}

/** The highest peak RSS docs/benchmark.md reports, in MiB (the bench reads VmHWM in kB / 1024). */
function measuredPeakRssMiB(): number {
  const lines = read('docs/benchmark.md')
    .split('\n')
    .filter((l) => /RSS/.test(l));
  const figures = lines.flatMap((l) =>
    [...l.matchAll(/(\d+)(?:–(\d+))? MB/g)].map((m) => Number(m[2] ?? m[1])),
  );
  return Math.max(...figures);
}

function mebibytes(quantity: string): number {
  const m = /^(\d+)(Mi|Gi|M|G)$/.exec(String(quantity));
  if (!m) throw new Error(`unexpected memory quantity ${quantity}`);
  const n = Number(m[1]);
  return { Mi: n, Gi: n * 1024, M: (n * 1e6) / 2 ** 20, G: (n * 1e9) / 2 ** 20 }[
    m[2] as 'Mi' | 'Gi' | 'M' | 'G'
  ];
}

function resourceProblems(sts: Obj, peakMiB: number): string[] {
  const out: string[] = [];
  const r = containers(sts)[0].resources ?? {};
  if (!r.requests?.cpu || !r.limits?.cpu) out.push('cpu request or limit missing');
  if (!r.requests?.memory || !r.limits?.memory) return [...out, 'memory request or limit missing'];
  if (mebibytes(r.requests.memory) < peakMiB)
    out.push(`memory request ${r.requests.memory} is below the ${peakMiB} MiB peak RSS measured`);
  if (mebibytes(r.limits.memory) < 2 * peakMiB)
    out.push(`memory limit ${r.limits.memory} leaves less than the measured peak again for V8's growth`);
  return out;
}

describe('deploy/kubernetes: what its comments argue', () => {
  const sts = the('StatefulSet');
  const job = the('Job');
  const peak = measuredPeakRssMiB();

  it('puts each spool on its own PersistentVolumeClaim, kept when scaled or deleted', () => {
    expect(spoolProblems(sts)).toEqual([]);
    const onEmptyDir = structuredClone(sts);
    onEmptyDir.spec.template.spec.volumes.push({ name: 'spool', emptyDir: {} });
    delete onEmptyDir.spec.volumeClaimTemplates;
    expect(spoolProblems(onEmptyDir)).toEqual([
      'the spool\'s volume "spool" is not a volumeClaimTemplate',
      'the spool\'s volume "spool" is a pod volume (name, emptyDir)',
    ]);
    const elsewhere = structuredClone(sts);
    envOf(containers(elsewhere)[0], 'DATABASE_PATH').value = '/var/lib/consig/consig.db';
    expect(spoolProblems(elsewhere)).toEqual([
      "nothing is mounted at /var/lib/consig, the spool's directory",
    ]);
    const deleted = structuredClone(sts);
    deleted.spec.persistentVolumeClaimRetentionPolicy.whenScaled = 'Delete';
    expect(spoolProblems(deleted)).toEqual(["the spool's claims are deleted whenScaled"]);
  });

  it('probes readiness on /readyz and liveness on /healthz, patiently', () => {
    expect(probeProblems(sts)).toEqual([]);
    const swapped = structuredClone(sts);
    const c = containers(swapped)[0];
    [c.readinessProbe, c.livenessProbe] = [c.livenessProbe, c.readinessProbe];
    expect(probeProblems(swapped)).toEqual(
      expect.arrayContaining(['readinessProbe on /healthz, not /readyz']),
    );
    expect(probeProblems(swapped)).toEqual(
      expect.arrayContaining(['livenessProbe on /readyz, not /healthz']),
    );
    const hasty = structuredClone(sts);
    Object.assign(containers(hasty)[0].livenessProbe, {
      periodSeconds: 5,
      failureThreshold: 3,
      timeoutSeconds: 1,
    });
    expect(probeProblems(hasty)).toEqual([
      'liveness restarts a replica that missed 11 s of checks (< 30 s)',
      'liveness gives a check 1 s (< 2 s)',
    ]);
    const wrongPort = structuredClone(sts);
    containers(wrongPort)[0].readinessProbe.httpGet.port = 8080;
    expect(probeProblems(wrongPort)).toEqual(["readinessProbe on port 8080, not the container's"]);
  });

  it('gives a stopping replica a grace period above its drain', () => {
    expect(drainSeconds(sts)).toBe(5 + 10 + 5 + 10 + 10 + 2);
    expect(graceProblems(sts)).toEqual([]);
    const longer = structuredClone(sts);
    envOf(containers(longer)[0], 'SHUTDOWN_TIMEOUT_MS').value = '20000';
    expect(graceProblems(longer)).toEqual(['terminationGracePeriodSeconds 60 is not above the drain, 72 s']);
    const unset = structuredClone(sts);
    delete podSpec(unset).terminationGracePeriodSeconds;
    expect(graceProblems(unset)).toEqual(['terminationGracePeriodSeconds 30 is not above the drain, 42 s']);
  });

  it.each([
    ['StatefulSet', sts],
    ['migrate Job', job],
  ])('runs the %s as non-root on a read-only root filesystem', (_name, workload) => {
    expect(securityProblems(workload)).toEqual([]);
    const loose = structuredClone(workload);
    delete podSpec(loose).securityContext.runAsNonRoot;
    containers(loose)[0].securityContext.readOnlyRootFilesystem = false;
    expect(securityProblems(loose)).toEqual([
      'pod: runAsNonRoot is not true',
      `${containers(loose)[0].name}: readOnlyRootFilesystem is not true`,
    ]);
  });

  it('takes every secret from the Secret, never from a value', () => {
    expect(secretProblems(sts, ['DATABASE_URL', 'WEBHOOK_SECRETS'])).toEqual([]);
    expect(secretProblems(job, ['DATABASE_URL'])).toEqual([]);
    const inline = structuredClone(sts);
    containers(inline)[0].env.push(
      { name: 'FORWARD_SECRET', value: 'x' },
      { name: 'PGURL', value: 'postgres://u:pw@db:5432/consig' },
    );
    envOf(containers(inline)[0], 'WEBHOOK_SECRETS').valueFrom = undefined;
    envOf(containers(inline)[0], 'WEBHOOK_SECRETS').value = 's3cret';
    expect(secretProblems(inline, ['DATABASE_URL', 'WEBHOOK_SECRETS'])).toEqual([
      'consig-receiver: WEBHOOK_SECRETS is not from a Secret',
      'consig-receiver: FORWARD_SECRET is not from a Secret',
      'consig-receiver: PGURL holds a URL with a password',
      'consig-receiver: WEBHOOK_SECRETS is missing or not from a Secret',
    ]);
  });

  it('ships a Secret of placeholders that cannot start a replica, with the keys the workloads read', () => {
    const secret = the('Secret');
    expect(secret.data).toBeUndefined();
    const values: Record<string, string> = secret.stringData;
    expect(() => loadConfig(values, { requireSecrets: true })).toThrow(/WEBHOOK_SECRETS|DATABASE_URL/);
    // Even with a webhook secret filled in, the placeholder DATABASE_URL stops startup (it never
    // falls back to SQLite mode, as an empty one would).
    expect(() => loadConfig({ ...values, WEBHOOK_SECRETS: 'x' }, { requireSecrets: true })).toThrow(
      /DATABASE_URL/,
    );
    const keys = [sts, job].flatMap((w) =>
      containers(w).flatMap((c) => (c.env ?? []).map((e: Obj) => e.valueFrom?.secretKeyRef).filter(Boolean)),
    );
    for (const ref of keys) {
      expect(ref.name).toBe(secret.metadata.name);
      expect(Object.keys(values)).toContain(ref.key);
    }
  });

  it('requests resources from the figures measured in docs/benchmark.md', () => {
    expect(peak).toBeGreaterThanOrEqual(200);
    expect(resourceProblems(sts, peak)).toEqual([]);
    const small = structuredClone(sts);
    containers(small)[0].resources = {
      requests: { cpu: '100m', memory: '128Mi' },
      limits: { memory: '256Mi' },
    };
    expect(resourceProblems(small, peak)).toEqual([
      'cpu request or limit missing',
      `memory request 128Mi is below the ${peak} MiB peak RSS measured`,
      "memory limit 256Mi leaves less than the measured peak again for V8's growth",
    ]);
    expect(containers(job)[0].resources.limits.memory).toBeDefined();
  });

  it('migrates with the image the StatefulSet rolls out, DATABASE_URL from the Secret', () => {
    const [migrate] = containers(job);
    expect(migrate.image).toBe(containers(sts)[0].image);
    expect(migrate.command).toEqual(['node', 'dist/src/cli/bin.js', 'migrate']);
    expect(podSpec(job).restartPolicy).toBe('Never');
    // The Job's writable places are volumes too (read-only root): DATABASE_PATH is on one.
    const path = envOf(migrate, 'DATABASE_PATH').value as string;
    expect(migrate.volumeMounts.map((m: Obj) => m.mountPath)).toContain(dirname(path));
  });

  it('wires the Services, the ServiceMonitor and the PodDisruptionBudget to the replicas', () => {
    const pods = sts.spec.template.metadata.labels;
    const selects = (selector: Record<string, string>) =>
      Object.entries(selector).every(([k, v]) => pods[k] === v) && Object.keys(selector).length > 0;
    const traffic = the('Service', 'consig-receiver');
    const headless = the('Service', sts.spec.serviceName);
    expect(selects(sts.spec.selector.matchLabels)).toBe(true);
    expect(selects(traffic.spec.selector)).toBe(true);
    expect(selects(headless.spec.selector)).toBe(true);
    expect(headless.spec.clusterIP).toBe('None');
    expect(headless.spec.publishNotReadyAddresses).toBe(true);
    const monitor = the('ServiceMonitor');
    expect(
      Object.entries(monitor.spec.selector.matchLabels).every(([k, v]) => headless.metadata.labels[k] === v),
    ).toBe(true);
    expect(
      Object.entries(monitor.spec.selector.matchLabels).some(([k, v]) => traffic.metadata.labels[k] !== v),
    ).toBe(true);
    expect(headless.spec.ports.map((p: Obj) => p.name)).toContain(monitor.spec.endpoints[0].port);
    expect(monitor.spec.endpoints[0].path).toBe('/metrics');
    const pdb = the('PodDisruptionBudget');
    expect(selects(pdb.spec.selector.matchLabels)).toBe(true);
    expect(pdb.spec.maxUnavailable).toBe(1);
    expect(sts.spec.replicas).toBeGreaterThan(pdb.spec.maxUnavailable);
  });
});
