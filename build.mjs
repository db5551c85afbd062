// Bundles each program into one ESM file under dist/ that imports nothing but node:
// builtins, so a copy of that one file runs anywhere a new enough Node.js is installed.
// The web console (web/) is built first, into dist/console, and carried inside the master.

import { build, transform } from 'esbuild';

import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';

/** The console's files by name: its script bundled for browsers and its style, both minified; the rest as written. */
async function buildConsole() {
  const script = await build({
    entryPoints: ['web/src/main.ts'],
    bundle: true,
    minify: true,
    format: 'esm',
    target: ['chrome120', 'firefox121', 'safari17'],
    legalComments: 'none',
    write: false,
    logLevel: 'warning',
  });
  const files = {
    'index.html': readFileSync('web/index.html', 'utf8'),
    'console.js': script.outputFiles[0].text,
    'console.css': (await transform(readFileSync('web/console.css', 'utf8'), { loader: 'css', minify: true })).code,
    'favicon.svg': readFileSync('web/favicon.svg', 'utf8'),
  };
  mkdirSync('dist/console', { recursive: true });
  for (const [name, text] of Object.entries(files)) writeFileSync(`dist/console/${name}`, text);
  const kib = Object.values(files).reduce((sum, text) => sum + Buffer.byteLength(text), 0) / 1024;
  console.log(`dist/console ${kib.toFixed(1)} KiB`);
  return files;
}

const consoleFiles = await buildConsole();

// The agent runs on nodes that may carry an older Node.js, so it is built for 20. It is
// built first: the master carries it inside, to install it on nodes.
export const programs = {
  agent: { entry: 'cmd/agent/main.ts', target: 'node20' },
  master: { entry: 'cmd/master/main.ts', target: 'node24', embedAgent: true },
  license: { entry: 'cmd/license/main.ts', target: 'node24' },
};

for (const [name, { entry, target, embedAgent }] of Object.entries(programs)) {
  const outfile = `dist/${name}.mjs`;
  const result = await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target,
    packages: 'bundle',
    legalComments: 'none',
    metafile: true,
    // Written below, whole: a program started while a build runs never reads half a bundle.
    write: false,
    logLevel: 'warning',
    define: embedAgent
      ? {
          __AGENT_BUNDLE__: JSON.stringify(readFileSync('dist/agent.mjs', 'utf8')),
          __CONSOLE_ASSETS__: JSON.stringify(consoleFiles),
        }
      : {},
  });
  const external = result.metafile.outputs[outfile].imports.filter((i) => i.external && !i.path.startsWith('node:'));
  if (external.length > 0)
    throw new Error(`${outfile} imports non-builtin modules: ${external.map((i) => i.path).join(', ')}`);
  mkdirSync('dist', { recursive: true });
  writeFileSync(`${outfile}.tmp`, result.outputFiles[0].contents, { mode: 0o755 });
  renameSync(`${outfile}.tmp`, outfile);
  console.log(`${outfile} ${(result.metafile.outputs[outfile].bytes / 1024).toFixed(1)} KiB`);
}
