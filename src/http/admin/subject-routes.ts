import express, { type Request, type Response, Router } from 'express';
import type { SubjectAction } from '../../core/subject-report';
import { subjectExportOf, subjectJson } from '../../core/subject-report';
import type { AppDeps } from '../app-deps';
import { SUBJECTS_UNAVAILABLE, subjectAsk, subjectRun } from '../subject-request';
import { ADMIN_TOKEN_PERSON, adminAddress } from './read-audit';

/**
 * One person's data (issue 45, LGPD; contract §4): `POST /admin/subjects/find`, `/export` and
 * `/erase`, the CPF in a JSON body, never in the URL. The same run as `subject find|export|erase`
 * (src/subject-places.ts, injected as AppDeps.subjects), on this server's log, its spool in cluster
 * mode and a SQLite log's backups; each use a `console_audit` row (`subject_find`, `subject_export`,
 * `subject_erase`), person `admin-token`, the client's address, written before the answer.
 */

type SubjectDeps = Pick<AppDeps, 'subjects' | 'clock' | 'config'>;

export function subjectRoutes(deps: SubjectDeps): Router {
  const router = Router();
  const json = express.json({ limit: '4kb' });
  for (const action of ['find', 'export', 'erase'] as const)
    router.post(`/subjects/${action}`, json, (req, res) => answer(deps, action, req, res));
  return router;
}

async function answer(deps: SubjectDeps, action: SubjectAction, req: Request, res: Response): Promise<void> {
  // Nothing here is for a cache: the export holds the person's data in full.
  res.set('cache-control', 'no-store');
  if (deps.subjects === undefined) {
    res.status(503).json({ error: 'subjects_unavailable', message: SUBJECTS_UNAVAILABLE });
    return;
  }
  const ask = subjectAsk(req.body, action);
  if ('field' in ask) {
    res.status(400).json({ error: 'bad_request', message: ask.message });
    return;
  }
  const now = deps.clock.now();
  const ip = adminAddress(req, deps.config.trustProxy ?? 0);
  const report = await deps.subjects(
    subjectRun(
      action,
      ask,
      { by: ADMIN_TOKEN_PERSON, audit: { person: ADMIN_TOKEN_PERSON, session: null, ip } },
      now,
    ),
  );
  res.json(
    action === 'export' ? subjectExportOf(report, ask.cpf, now.toISOString()) : subjectJson(report, action),
  );
}
