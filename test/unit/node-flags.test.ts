import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { RECEIVER_NODE_FLAGS } from '../../bench/receiver-node';

/**
 * The receiver's Node.js flags have one home (bench/receiver-node.ts); the places that start it
 * must say the same, or the bench would measure another process than the one shipped.
 */
const root = join(__dirname, '..', '..');

it("the Dockerfile's CMD runs the receiver with the bench's flags", () => {
  const cmd = /^CMD (\[.*\])$/m.exec(readFileSync(join(root, 'Dockerfile'), 'utf8'));
  expect(cmd).not.toBeNull();
  expect(JSON.parse(cmd![1]!)).toEqual(['node', ...RECEIVER_NODE_FLAGS, 'dist/src/cli/bin.js', 'serve']);
});

it('npm start runs the receiver with the same flags', () => {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: { start: string } };
  expect(pkg.scripts.start).toContain(`node ${RECEIVER_NODE_FLAGS.join(' ')} dist/src/cli/bin.js serve`);
});
