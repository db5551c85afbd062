// The agent program the installer copies to nodes. The bundled master carries it inside
// (build.mjs defines __AGENT_BUNDLE__), so the appliance stays one file; run from source,
// it is read from dist/agent.mjs, which `npm run build` writes.

import { readFileSync } from 'node:fs';

declare const __AGENT_BUNDLE__: string | undefined;

export function agentBundle(): Buffer {
  if (typeof __AGENT_BUNDLE__ === 'string') return Buffer.from(__AGENT_BUNDLE__);
  try {
    return readFileSync('dist/agent.mjs');
  } catch {
    throw new Error('no agent bundle: run `npm run build` first (dist/agent.mjs)');
  }
}
