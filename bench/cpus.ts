import { execFileSync } from 'node:child_process';

/** Pins processes, every thread of each, to `cpus` (taskset's list form); one that exited is skipped. */
export function pinToCpus(pids: readonly (number | undefined)[], cpus: string): void {
  for (const pid of pids) {
    if (pid === undefined) continue;
    try {
      execFileSync('taskset', ['-a', '-p', '-c', cpus, String(pid)], { stdio: 'ignore' });
    } catch {
      // exited meanwhile
    }
  }
}
