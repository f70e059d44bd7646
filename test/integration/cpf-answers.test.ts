import { TOKEN, echoingDestination, environment, sweep } from '../helpers/cpf-sweep';
import { startTestReceiver, type TestReceiver } from '../helpers/receiver';
import { tempDir } from '../helpers/tmp';

/**
 * Contract §5 in SQLite mode, in the fast tier: no admin answer, command output, console page or
 * log line shows a CPF in full, even with a full-CPF destination (test/helpers/cpf-sweep.ts says
 * what is swept). Removing the mask from any answer that carries a CPF fails `npm test` here, not
 * only in the postgres tier (issue 37); cluster mode runs the same sweep in cpf-admin-answers.test.ts.
 */

echoingDestination();
let dir: ReturnType<typeof tempDir>;
let receiver: TestReceiver | undefined;
beforeEach(() => {
  dir = tempDir();
});
afterEach(async () => {
  await receiver?.stop();
  receiver = undefined;
  dir.cleanup();
});

describe('no full CPF in any admin answer, command output or log line of a full-CPF setup', () => {
  jest.setTimeout(120_000);

  it('SQLite mode', async () => {
    const env = environment(dir.dir);
    receiver = await startTestReceiver({ env: { ADMIN_TOKEN: TOKEN, ...env } });
    await sweep(receiver, { ...env, DATABASE_PATH: receiver.dbPath });
  });
});
