import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';

/**
 * Every relative link of the front door (README.md, CONTRIBUTING.md) and of the guides (docs/*.md)
 * reaches a file of the repository, and every `#anchor` a heading of its target, as GitHub renders
 * them: a guide moved or a heading renamed fails here instead of leaving a dead link.
 */

const root = join(__dirname, '..', '..');

const documents = [
  'README.md',
  'CONTRIBUTING.md',
  ...readdirSync(join(root, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** The text outside fenced code blocks and inline code, where a `[x](y)` is not a link. */
function prose(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '').replace(/`[^`\n]*`/g, '');
}

/** A heading's text as GitHub shows it: links reduced to their text, emphasis and code marks gone. */
function headingText(raw: string): string {
  return raw
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/[`*]/g, '')
    .replace(/<[^>]+>/g, '')
    .trim();
}

/**
 * GitHub's anchor for a heading (github-slugger): lower case, every character but letters, marks,
 * digits, `_`, `-` and spaces dropped, spaces turned into `-`; a repeated slug gets `-1`, `-2`, …
 */
function slug(heading: string): string {
  return headingText(heading)
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  const withoutCode = markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '');
  for (const m of withoutCode.matchAll(/^#{1,6} +(.+?) *#* *$/gm)) {
    const base = slug(m[1] as string);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  for (const m of markdown.matchAll(/<a (?:name|id)="([^"]+)"/g)) out.add(m[1] as string);
  return out;
}

/** Inline links `[text](target)` and reference definitions `[label]: target`. */
function links(markdown: string): string[] {
  const text = prose(markdown);
  const inline = [...text.matchAll(/\]\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+"[^"]*")?\)/g)];
  const refs = [...text.matchAll(/^\s*\[[^\]]+\]:\s+(\S+)/gm)];
  return [...inline, ...refs].map((m) => m[1] as string);
}

const external = /^(?:[a-z][a-z0-9+.-]*:|\/\/)/i;

function problems(doc: string): string[] {
  const source = join(root, doc);
  const markdown = readFileSync(source, 'utf8');
  const out: string[] = [];
  for (const target of links(markdown)) {
    if (external.test(target)) continue;
    const [path = '', anchor] = target.split('#') as [string, string | undefined];
    const file = path === '' ? source : join(dirname(source), decodeURIComponent(path));
    if (!existsSync(file)) {
      out.push(`${doc}: ${target}: no such file`);
      continue;
    }
    if (anchor === undefined || anchor === '') continue;
    if (statSync(file).isDirectory() || !file.endsWith('.md')) {
      out.push(`${doc}: ${target}: an anchor into something that is not a Markdown file`);
      continue;
    }
    if (!anchors(readFileSync(file, 'utf8')).has(decodeURIComponent(anchor)))
      out.push(`${doc}: ${target}: no heading with that anchor in ${relative(root, file)}`);
  }
  return out;
}

it('forms anchors as GitHub does', () => {
  expect(slug('6.1. Delivery rules')).toBe('61-delivery-rules');
  expect(slug('2.3. Registration (averbação) request record')).toBe(
    '23-registration-averbação-request-record',
  );
  expect(slug('10. Cluster mode — planned, not built yet')).toBe('10-cluster-mode--planned-not-built-yet');
  expect(slug('`POST /api/v1/webhooks`')).toBe('post-apiv1webhooks');
  expect(slug("Forwarding to the lender's own systems")).toBe('forwarding-to-the-lenders-own-systems');
  expect(slug('ConsigWebhookSilence')).toBe('consigwebhooksilence');
  expect(slug('Reading the log, [with a link](x.md)')).toBe('reading-the-log-with-a-link');
  expect([...anchors('## A\n```\n## B\n```\n## A\n')]).toEqual(['a', 'a-1']);
});

it('finds links outside code only', () => {
  expect(links('[a](x.md#y) `[b](z.md)` [c][r]\n```\n[d](w.md)\n```\n[r]: v.md\n')).toEqual([
    'x.md#y',
    'v.md',
  ]);
});

it('the front door and the guides are all checked', () => {
  expect(documents).toEqual(expect.arrayContaining(['README.md', 'CONTRIBUTING.md', 'docs/README.md']));
  expect(documents.length).toBeGreaterThanOrEqual(10);
});

it.each(documents)('every relative link and anchor of %s resolves', (doc) => {
  expect(problems(doc)).toEqual([]);
});
