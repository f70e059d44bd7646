import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

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

/** Peak resident set (VmHWM) of a process in MB, from /proc (null elsewhere). */
export function peakRss(pid: number | undefined): number | null {
  if (pid === undefined) return null;
  try {
    const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m?.[1] === undefined ? null : Number(m[1]) / 1024;
  } catch {
    return null;
  }
}
