import express from 'express';
import getRawBody from 'raw-body';
import { verifySignature } from '../src/domain/signature';

/**
 * Bench target 2: what a developer writes first. An Express 5 route that reads the raw body,
 * verifies its HMAC and answers 200, with no storage and no logging. Listens on HOST:PORT.
 */

const secrets = (process.env.WEBHOOK_SECRETS ?? '').split(',').filter((s) => s !== '');

const app = express();

app.post('/webhooks', async (req, res) => {
  const body = await getRawBody(req, { length: req.headers['content-length'], limit: '256kb' });
  const verdict = verifySignature(body, req.headers['x-service-signature'], secrets);
  if (!verdict.ok) {
    res.status(401).json({ error: 'invalid_signature' });
    return;
  }
  res.status(200).json({ status: 'accepted' });
});

app.listen(Number(process.env.PORT), process.env.HOST ?? '127.0.0.1', (err) => {
  if (err) throw err;
});
