import { delivery, postRaw, signed } from '../helpers/payloads';
import { type ServerProcess, serveOnOneFile } from '../helpers/process';
import { eventually } from '../helpers/receiver';

/**
 * Real processes: the run of failed answers that deactivates the callback (interface §6.1, rule 4)
 * survives the receiver being killed or stopped, because the service's count does not restart
 * with it. Two 413s, SIGKILL, and the next process's third 413 is the alarm; SIGTERM, and the run
 * is still there for the one after.
 */

const files = serveOnOneFile({ MAX_BODY_BYTES: '300' });
const serve = () => files.serve();

function send(s: ServerProcess, body: unknown) {
  const { raw, signature } = signed(body);
  return postRaw(`${s.url}/webhooks`, raw, {
    'content-type': 'application/json',
    'x-service-signature': signature,
  });
}

const tooBig = () => ({ ...delivery(), padding: 'x'.repeat(1000) });

async function gauges(s: ServerProcess): Promise<{ failed: number; alarm: number }> {
  const text = await (await fetch(`${s.url}/metrics`)).text();
  const value = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);
  return {
    failed: value('consig_webhook_consecutive_failed_answers'),
    alarm: value('consig_webhook_deactivation_alarm'),
  };
}

function alarmLines(s: ServerProcess): string[] {
  return s
    .output()
    .split('\n')
    .filter((l) => l.includes('"level":"error"') && l.includes('consecutive webhook deliveries'));
}

it('the run of failed answers survives SIGKILL and SIGTERM: the third 413 raises the alarm in the next process', async () => {
  const first = await serve();
  for (let i = 0; i < 2; i++) expect((await send(first, tooBig())).status).toBe(413);
  expect(await gauges(first)).toEqual({ failed: 2, alarm: 0 });
  first.child.kill('SIGKILL');
  await first.exited;

  const second = await serve();
  expect(await gauges(second)).toEqual({ failed: 2, alarm: 0 });
  expect((await send(second, tooBig())).status).toBe(413);
  expect(await gauges(second)).toEqual({ failed: 3, alarm: 1 });
  // The log line reaches this process through the child's stdout, maybe after the answers (a CI
  // run read the output before it came); then exactly one.
  await eventually(() => alarmLines(second).length > 0, 'the alarm logged', 10_000);
  expect(alarmLines(second)).toEqual([expect.stringMatching(/3 consecutive .*MAX_BODY_BYTES \(300\)/)]);
  second.child.kill('SIGTERM');
  expect((await second.exited).code).toBe(0);

  const third = await serve();
  expect(await gauges(third)).toEqual({ failed: 3, alarm: 1 });
  // A 200 ends the run, and that too is what the next start sees.
  expect((await send(third, delivery())).status).toBe(200);
  expect(await gauges(third)).toEqual({ failed: 0, alarm: 0 });
  third.child.kill('SIGTERM');
  await third.exited;
  const fourth = await serve();
  expect(await gauges(fourth)).toEqual({ failed: 0, alarm: 0 });
});
