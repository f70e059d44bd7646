import { Router } from 'express';
import { withMaskedCpf } from '../../domain/privacy';
import { parseNuProposta } from '../../store/proposals';
import type { AppDeps } from '../app';

/** `GET /admin/proposals/:nu`: where a proposal stands and its timeline, the CPF masked (LGPD). */
export function proposalRoutes(deps: Pick<AppDeps, 'store'>): Router {
  const { proposals } = deps.store;
  const router = Router();
  router.get('/proposals/:nu', (req, res) => {
    const nu = parseNuProposta(String(req.params.nu));
    const proposal = proposals.get(nu);
    const timeline = proposals.timeline(nu);
    if (!proposal && timeline.length === 0) {
      res.status(404).json({ error: 'not_found', message: `no proposal ${req.params.nu}` });
      return;
    }
    res.json({ proposal: proposal ? withMaskedCpf(proposal) : null, timeline });
  });
  return router;
}
