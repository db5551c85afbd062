#!/usr/bin/env node
// Issues licenses: `license keygen DIR` makes an Ed25519 key pair; `license issue` signs a
// license for the master's data dir with the private key.

import { requireNode } from '../../internal/runtime/require-node.ts';
import { writeFileAtomic } from '../../internal/runtime/files.ts';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { issueLicense } from '../../internal/license/license.ts';
import { writeKeyPair } from '../../internal/runtime/key-pair.ts';
import { formatTime, parseDateTime } from '../../internal/schema/schema.ts';

requireNode([24, 0, 0]);

const usage = `Usage:
  license keygen DIR
      writes DIR/license-private.pem (keep it secret) and DIR/license-public.pem (give it to
      the master with --license-key)
  license issue --key PRIVATE.pem --licensee NAME [--edition NAME] [--max-nodes N]
                [--expires RFC3339] [--out FILE]
      prints the signed license (or writes it to FILE, e.g. DATA_DIR/license.json)
`;

function fail(message: string): never {
  process.stderr.write(`license: ${message}\n`);
  process.exit(2);
}

function options(args: string[]): Map<string, string> {
  const out = new Map<string, string>();
  for (let i = 0; i < args.length; i += 2) {
    const flag = args[i]!;
    const value = args[i + 1];
    if (!flag.startsWith('--') || value === undefined) fail(`expected --option value pairs, got '${flag}'`);
    out.set(flag.slice(2), value);
  }
  return out;
}

const [command, ...rest] = process.argv.slice(2);
if (command === 'keygen') {
  const dir = rest[0] ?? fail('keygen needs a directory');
  let written: { privatePath: string; publicPath: string };
  try {
    written = writeKeyPair(dir, 'license');
  } catch (error) {
    fail((error as Error).message);
  }
  process.stdout.write(`wrote ${written.privatePath} and ${written.publicPath}\n`);
} else if (command === 'issue') {
  const opts = options(rest);
  const keyPath = opts.get('key') ?? fail('issue needs --key');
  const licensee = opts.get('licensee') ?? fail('issue needs --licensee');
  const maxNodes = opts.has('max-nodes') ? Number(opts.get('max-nodes')) : null;
  if (maxNodes !== null && !(Number.isInteger(maxNodes) && maxNodes >= 0)) fail('--max-nodes must be a whole number');
  const expires = opts.get('expires');
  if (expires !== undefined && Number.isNaN(parseDateTime(expires)))
    fail('--expires must be an RFC 3339 date-time of a real calendar date');
  const license = {
    license_id: randomUUID(),
    edition: opts.get('edition') ?? 'pro',
    licensee,
    limits: { max_nodes: maxNodes },
    issued_at: formatTime(Date.now()),
    expires_at: expires === undefined ? null : formatTime(parseDateTime(expires)),
  };
  const text = issueLicense(license, readFileSync(keyPath, 'utf8'));
  const out = opts.get('out');
  if (out) {
    mkdirSync(dirname(out), { recursive: true, mode: 0o700 });
    writeFileAtomic(out, text);
    // Said, as keygen says what it wrote: a quiet success left users unsure anything was written, or what.
    const nodes = maxNodes === null ? 'any number of nodes' : `${maxNodes} nodes`;
    const until = license.expires_at === null ? 'never expires' : `expires ${license.expires_at}`;
    process.stdout.write(
      `wrote ${out}: license ${license.license_id}, ${license.edition} edition for ${licensee}, ${nodes}, ` +
        `${until}; install it as DATA_DIR/license.json and start the master with --license-key PUBLIC.pem\n`,
    );
  } else process.stdout.write(text);
} else {
  process.stdout.write(usage);
  process.exit(command === undefined || command === '--help' ? 0 : 2);
}
