import type { Request, Response, Router } from 'express';
import { personLabel } from '../../domain/oidc';
import { ADMIN_TOKEN_PERSON } from '../admin/read-audit';
import { SUBJECTS_UNAVAILABLE, subjectAsk, subjectRun } from '../subject-request';
import { actorOf, addressOf, contextOf, requireAdmin } from './console-auth';
import type { ConsoleDeps } from './deps';
import type { Query } from './filters';
import { subjectsPage } from './pages/subjects-page';

/**
 * `/console/subjects` (admins only, contract §9; issue 45): find a person by CPF (a POST: the CPF
 * never in a URL) and erase them, through the same run as `subject find|erase` and
 * `/admin/subjects/*` (ConsoleDeps.subjects). Each use is a `console_audit` row written by that
 * run (`subject_find`, `subject_erase`) with the session's tag, its person (signed in through the
 * identity provider) and the client's address. A viewer is refused (403, audited `refused: role`).
 */

export function subjectRoutes(router: Router, d: ConsoleDeps): void {
  router.use(['/subjects', '/subjects/erase'], requireAdmin(d));
  router.get('/subjects', (_req, res) => {
    res.send(subjectsPage(contextOf(d, res), { kind: 'forms' }));
  });
  router.post('/subjects', (req, res) => run(d, 'find', req, res));
  router.post('/subjects/erase', (req, res) => run(d, 'erase', req, res));
}

async function run(d: ConsoleDeps, action: 'find' | 'erase', req: Request, res: Response): Promise<void> {
  const ctx = contextOf(d, res);
  const refuse = (status: number, message: string) =>
    void res.status(status).send(subjectsPage(ctx, { kind: 'refused', message }));
  if (d.subjects === undefined) return refuse(503, SUBJECTS_UNAVAILABLE);
  const body = (req.body ?? {}) as Query;
  const ask = subjectAsk(body, action);
  if ('field' in ask) return refuse(400, ask.message);
  if (action === 'erase' && body.confirm !== 'erase')
    return refuse(400, 'confirm: tick the box to erase (it cannot be undone). Nothing was changed.');
  const report = await d.subjects(subjectRun(action, ask, who(d, req, res), d.clock.now()));
  res.send(subjectsPage(ctx, { kind: 'report', action, cpf: ask.cpf, report }));
}

/**
 * Who asked: the person signed in through the identity provider (e-mail, else subject), else the
 * admin token's session, named in the erasure by its tag (`console:<tag>`) and in the audit by it.
 */
function who(d: ConsoleDeps, req: Request, res: Response) {
  const actor = actorOf(res);
  const person = actor?.person === undefined || actor.person === null ? null : personLabel(actor.person);
  const session = actor?.tag ?? null;
  return {
    by: person ?? (session === null ? ADMIN_TOKEN_PERSON : `console:${session}`),
    audit: { person, session, ip: addressOf(d, req) },
  };
}
