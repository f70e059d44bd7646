/**
 * The Node.js flags the receiver runs with where this project starts it: the Dockerfile's CMD and
 * `npm start` (test/unit/node-flags.test.ts checks that they agree), and so every receiver the
 * bench measures, this build's and a `--baseline`'s alike.
 *
 * `--max-semi-space-size=4`: V8's young generation on the main thread at most 2 × 4 MB instead of
 * the size V8 derives from the machine's memory (16 MB a semi-space on Node 20 here). A request's
 * garbage dies young either way; the receiver's peak RSS at c=50 fell by 20–25 MB (ingest 185–190
 * → 163–172 MB, with forwarding 224–234 → 195–212 MB) with req/s and CPU per request unchanged
 * within this machine's noise (issue 23; docs/benchmark.md). The forwarding thread's own young
 * generation is set in code (runtime/sender-thread.ts).
 */
export const RECEIVER_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=4'];
