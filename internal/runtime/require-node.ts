// Each program calls this first: it refuses, with a clear message, to run on a Node.js older
// than the one it is built and tested for.

function isOlder(version: readonly number[], than: readonly number[]): boolean {
  for (let i = 0; i < than.length; i++) {
    const part = version[i] ?? 0;
    if (part !== than[i]) return part < than[i]!;
  }
  return false;
}

export function requireNode(minimum: readonly [number, number, number], current = process.versions.node): void {
  if (!isOlder(current.split('.').map(Number), minimum)) return;
  process.stderr.write(
    `This program needs Node.js ${minimum.join('.')} or newer; this is ${current} (${process.execPath}).\n` +
      'Install Node.js 24 LTS from your distribution or nodejs.org, or run it through `npm start` in the source ' +
      'tree, which uses the pinned runtime.\n',
  );
  process.exit(1);
}
