// Bundles each program into one ESM file under dist/ that imports nothing but node:
// builtins, so a copy of that one file runs anywhere a new enough Node.js is installed.

import { build } from 'esbuild';
import { chmodSync } from 'node:fs';

export const programs = {
  master: 'cmd/master/main.ts',
  license: 'cmd/license/main.ts',
};

for (const [name, entry] of Object.entries(programs)) {
  const outfile = `dist/${name}.mjs`;
  const result = await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node24',
    packages: 'bundle',
    legalComments: 'none',
    metafile: true,
    logLevel: 'warning',
  });
  const external = result.metafile.outputs[outfile].imports.filter((i) => i.external && !i.path.startsWith('node:'));
  if (external.length > 0) throw new Error(`${outfile} imports non-builtin modules: ${external.map((i) => i.path).join(', ')}`);
  chmodSync(outfile, 0o755);
  console.log(`${outfile} ${(result.metafile.outputs[outfile].bytes / 1024).toFixed(1)} KiB`);
}
