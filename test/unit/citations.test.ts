import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

/**
 * Every `interface §N` and `contract §N` the code cites resolves to a numbered heading of
 * docs/service-interface.md or docs/contract.md, and no citation points at a document outside the
 * repository (the old `seed §` and `SPEC §` forms).
 */

const root = join(__dirname, '..', '..');

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

function headings(doc: string): Set<string> {
  const text = readFileSync(join(root, 'docs', doc), 'utf8');
  return new Set([...text.matchAll(/^#{2,4} (\d+(?:\.\d+)*)\.? /gm)].map((m) => m[1] as string));
}

const sources = ['src', 'test', 'bench'].flatMap((d) => files(join(root, d)));
const docs = { interface: headings('service-interface.md'), contract: headings('contract.md') };

it('the documents have the numbered sections the code cites', () => {
  expect(docs.interface.size).toBeGreaterThanOrEqual(25); // 9 chapters and 16 numbered sections
  expect([...docs.contract]).toEqual(['1', '2', '3', '4', '5', '6', '7', '8', '9', '10']);
});

it('every interface § and contract § citation in src/, test/ and bench/ resolves to a heading in docs/', () => {
  const unresolved: string[] = [];
  let cited = 0;
  for (const file of sources) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/\b(interface|contract) §(\d+(?:\.\d+)*)/g)) {
      cited += 1;
      const [, doc, section] = m as unknown as [string, 'interface' | 'contract', string];
      if (!docs[doc].has(section)) unresolved.push(`${relative(root, file)}: ${m[0]}`);
    }
  }
  expect(cited).toBeGreaterThan(50);
  expect(unresolved).toEqual([]);
});

it('no citation points at a document outside the repository', () => {
  const stale = sources.flatMap((file) =>
    [...readFileSync(file, 'utf8').matchAll(/\b(seed|SPEC) §[\d.]+/gi)].map(
      (m) => `${relative(root, file)}: ${m[0]}`,
    ),
  );
  expect(stale).toEqual([]);
});
