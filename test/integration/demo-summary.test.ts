import type { Scenario } from '../../src/cli/demo/scenarios';
import { summaryRow } from '../../src/cli/demo/summary';
import { delivery } from '../helpers/payloads';
import { eventually, startTestReceiver, type TestReceiver } from '../helpers/receiver';

/**
 * The demo's verdict column: the demo e2e test only checks that every row says "yes", so the
 * verdict itself must be able to say "NO".
 */

let r: TestReceiver;
beforeAll(async () => {
  r = await startTestReceiver();
  const approved = delivery('proposta.aprovada', { nu_proposta: 77 });
  await r.send(approved);
  await r.send(approved); // the same webhook_id again: a duplicate
  await eventually(() => r.store.proposals.get(77)?.status === 'aprovada', 'proposal 77 aprovada');
  await eventually(
    () => r.store.proposals.timeline(77)[0]?.duplicates === 1,
    'the duplicate of proposal 77 counted',
  );
});
afterAll(async () => {
  await r.stop();
});

const scenario = (expect: Scenario['expect']): Scenario => ({
  label: 'under test',
  expect,
  run: async () => {},
});

it('says yes for a proposal that ended where its scenario expected, with its counts', () => {
  expect(summaryRow(r.store, { nu: 77, scenario: scenario({ status: 'aprovada' }) })).toEqual({
    nu_proposta: 77,
    path: 'under test',
    stage: 'Proposta',
    status: 'aprovada',
    events: 1,
    duplicates: 1,
    late: 0,
    averbacao: '-',
    ok: 'yes',
  });
});

it.each([
  ['another status', { status: 'paga' }],
  [
    'an averbação that never happened',
    { status: 'aprovada', averbacao: { status: 'completed', source: 'webhook' } },
  ],
] as const)('says NO for %s', (_what, expected) => {
  expect(summaryRow(r.store, { nu: 77, scenario: scenario(expected) }).ok).toBe('NO');
});

it('says NO for a proposal the receiver never recorded', () => {
  const row = summaryRow(r.store, { nu: 78, scenario: scenario({ status: 'aprovada' }) });
  expect(row).toMatchObject({ status: undefined, events: 0, ok: 'NO' });
});
