import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RUN_DIR_ENV } from './postgres';

/**
 * jest's globalSetup for the tiers on PostgreSQL: a folder where each worker records the server it
 * starts (test/helpers/postgres.ts workerPostgres), inherited by the workers through the environment.
 * Several projects run it; the first one's folder serves the run.
 */
export default function setUp(): void {
  process.env[RUN_DIR_ENV] ??= mkdtempSync(join(tmpdir(), 'consig-pg-run-'));
}
