import { Router } from 'express';
import { withMaskedCpf } from '../../domain/privacy';
import { parseNuProposta } from '../../domain/log-rows';
import type { AdminStore } from '../../core/store-port';
import type { ReadAudit } from './read-audit';

/**
 * `GET /admin/proposals/:nu`: where a proposal stands and its timeline, the CPF masked (LGPD); each
 * answer audited (read-audit.ts): the proposal names its borrower, employer and amount.
 */
export function proposalRoutes(log: AdminStore, audited: ReadAudit): Router {
  const router = Router();
  router.get('/proposals/:nu', async (req, res) => {
    const { proposal, timeline } = await log.proposal(parseNuProposta(String(req.params.nu)));
    if (!proposal && timeline.length === 0) {
      res.status(404).json({ error: 'not_found', message: `no proposal ${req.params.nu}` });
      return;
    }
    await audited(req, { target: `proposal:${String(req.params.nu)}` });
    res.json({ proposal: proposal ? withMaskedCpf(proposal) : null, timeline });
  });
  return router;
}
