import { clusterBed } from '../helpers/cluster-bed';
import { TOKEN, echoingDestination, environment, sweep } from '../helpers/cpf-sweep';

/**
 * Contract §5 in cluster mode: no admin answer, command output, console page or log line shows a
 * CPF in full, even with a full-CPF destination (test/helpers/cpf-sweep.ts says what is swept).
 * SQLite mode runs the same sweep in the fast tier: test/integration/cpf-answers.test.ts.
 */

const bed = clusterBed({ prefix: 'cpf', env: { ADMIN_TOKEN: TOKEN } });
echoingDestination();

describe('no full CPF in any admin answer, command output or log line of a full-CPF setup', () => {
  jest.setTimeout(120_000);

  it('cluster mode', async () => {
    const env = environment(bed.dir.dir);
    const r = await bed.replica(env);
    await sweep(r, { ...env, DATABASE_URL: bed.url });
  });
});
