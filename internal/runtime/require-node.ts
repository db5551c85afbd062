// Imported first by each program: refuses, with a clear message, to run on a Node.js older
// than the one it is built and tested for (node:sqlite and its API need 24).

export const MIN_NODE = [24, 0, 0] as const;

function isOlder(version: readonly number[], than: readonly number[]): boolean {
  for (let i = 0; i < than.length; i++) {
    const part = version[i] ?? 0;
    if (part !== than[i]) return part < than[i]!;
  }
  return false;
}

const tooOld = isOlder(process.versions.node.split('.').map(Number), MIN_NODE);
if (tooOld) {
  process.stderr.write(
    `This program needs Node.js ${MIN_NODE.join('.')} or newer; this is ${process.versions.node} (${process.execPath}).\n` +
      'Install Node.js 24 LTS from your distribution or nodejs.org, or run it through `npm start` in the source tree, which uses the pinned runtime.\n',
  );
  process.exit(1);
}
