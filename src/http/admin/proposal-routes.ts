import { Router } from 'express';
import { withMaskedCpf } from '../../domain/privacy';
import { parseNuProposta } from '../../domain/log-rows';
import type { AdminStore } from '../../core/store-port';

/** `GET /admin/proposals/:nu`: where a proposal stands and its timeline, the CPF masked (LGPD). */
export function proposalRoutes(log: AdminStore): Router {
  const router = Router();
  router.get('/proposals/:nu', async (req, res) => {
    const { proposal, timeline } = await log.proposal(parseNuProposta(String(req.params.nu)));
    if (!proposal && timeline.length === 0) {
      res.status(404).json({ error: 'not_found', message: `no proposal ${req.params.nu}` });
      return;
    }
    res.json({ proposal: proposal ? withMaskedCpf(proposal) : null, timeline });
  });
  return router;
}
