#!/usr/bin/env node
// Signs agent bundles: `release keygen DIR` makes the release key pair (keep the private half off the master: it is
// what agents trust), `release sign` writes a bundle's signature beside it, `release verify` checks one.

import { readFileSync } from 'node:fs';
import { createPublicKey } from 'node:crypto';
import { BundleRefused, keyIdOf, signBundle, verifyBundle } from '../../internal/release/signature.ts';
import { writeFileAtomic } from '../../internal/runtime/files.ts';
import { writeKeyPair } from '../../internal/runtime/key-pair.ts';
import { requireNode } from '../../internal/runtime/require-node.ts';

requireNode([24, 0, 0]);

const usage = `Usage:
  release keygen DIR
      writes DIR/release-private.pem (keep it secret, and off the master) and DIR/release-public.pem (give it to the
      master with --release-key: its agents then run only bundles signed with the private half)
  release sign --key PRIVATE.pem --version VERSION FILE
      writes FILE.sig, the signature of the agent bundle FILE as VERSION
  release verify --key PUBLIC.pem FILE
      checks FILE against FILE.sig; exits 1, saying why, if it does not hold
`;

function fail(message: string, code = 2): never {
  process.stderr.write(`release: ${message}\n`);
  process.exit(code);
}

/** `--option value` pairs, then the one file they apply to. */
function parse(args: string[]): { options: Map<string, string>; file: string } {
  const options = new Map<string, string>();
  const files: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (!arg.startsWith('--')) files.push(arg);
    else if (args[i + 1] === undefined) fail(`${arg} needs a value`);
    else options.set(arg.slice(2), args[++i]!);
  }
  if (files.length !== 1) fail('name one bundle file');
  return { options, file: files[0]! };
}

const [command, ...rest] = process.argv.slice(2);
try {
  if (command === 'keygen') {
    const { privatePath, publicPath } = writeKeyPair(rest[0] ?? fail('keygen needs a directory'), 'release');
    const id = keyIdOf(createPublicKey(readFileSync(publicPath, 'utf8')));
    process.stdout.write(`wrote ${privatePath} and ${publicPath} (key ${id})\n`);
  } else if (command === 'sign') {
    const { options, file } = parse(rest);
    const key = readFileSync(options.get('key') ?? fail('sign needs --key PRIVATE.pem'), 'utf8');
    const signature = signBundle(readFileSync(file), options.get('version') ?? fail('sign needs --version'), key);
    writeFileAtomic(`${file}.sig`, `${JSON.stringify(signature, null, 2)}\n`, 0o644);
    process.stdout.write(`wrote ${file}.sig: version ${signature.version}, sha256 ${signature.sha256}\n`);
  } else if (command === 'verify') {
    const { options, file } = parse(rest);
    const key = createPublicKey(readFileSync(options.get('key') ?? fail('verify needs --key PUBLIC.pem'), 'utf8'));
    const version = verifyBundle(readFileSync(file), JSON.parse(readFileSync(`${file}.sig`, 'utf8')), [key]);
    process.stdout.write(`${file} is version ${version}, signed by ${keyIdOf(key)}\n`);
  } else process.stdout.write(usage);
} catch (error) {
  if (error instanceof BundleRefused) fail(`${rest.at(-1)} is refused: ${error.message}`, 1);
  fail((error as Error).message);
}
