// The web console's files, served at the root beside the API: built from web/ by build.mjs,
// carried inside the bundled master (so the appliance stays one file) and read from dist/console
// when run from source. Every answer forbids framing, inline script and any other origin.

import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';

declare const __CONSOLE_ASSETS__: Record<string, string> | undefined;

/** The files build.mjs writes, by the path they are served at. */
export const CONSOLE_FILES = {
  '/': 'index.html',
  '/console.js': 'console.js',
  '/console.css': 'console.css',
  '/favicon.svg': 'favicon.svg',
} as const;

const TYPES: Record<string, string> = {
  html: 'text/html; charset=utf-8',
  js: 'text/javascript; charset=utf-8',
  css: 'text/css; charset=utf-8',
  svg: 'image/svg+xml',
};

/** Nothing but this origin: no inline script or style, no framing, no form posted elsewhere. */
const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const SECURITY_HEADERS = {
  'Content-Security-Policy': CONTENT_SECURITY_POLICY,
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'no-referrer',
  'X-Content-Type-Options': 'nosniff',
  'Cross-Origin-Opener-Policy': 'same-origin',
  // Revalidated on every load, so an upgraded master never runs a stale console.
  'Cache-Control': 'no-cache',
};

interface Asset {
  body: Buffer;
  type: string;
  etag: string;
}

function loadAssets(): Map<string, Asset> {
  const files: Record<string, string> =
    typeof __CONSOLE_ASSETS__ === 'object' && __CONSOLE_ASSETS__ !== undefined
      ? __CONSOLE_ASSETS__
      : Object.fromEntries(
          Object.values(CONSOLE_FILES).map((name) => [name, readFileSync(`dist/console/${name}`, 'utf8')]),
        );
  const assets = new Map<string, Asset>();
  for (const [path, name] of Object.entries(CONSOLE_FILES)) {
    const text = files[name];
    if (text === undefined) throw new Error(`the console has no ${name}: run \`npm run build\` first`);
    const body = Buffer.from(text);
    const etag = `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`;
    assets.set(path, { body, type: TYPES[name.split('.').pop()!]!, etag });
  }
  return assets;
}

/**
 * A handler for the console's paths: answers GET and HEAD of them and returns true; returns
 * false for anything else (the API, and everything it answers 404 or 405 to).
 */
export function consoleHandler(): (req: IncomingMessage, res: ServerResponse) => boolean {
  // Loaded at the first request for a console path: the bundled master carries them, and a master run from source
  // without a build serves its API all the same (tests of one file, `npm run dev`), saying so only where it must.
  let assets: Map<string, Asset> | null = null;
  return (req, res) => {
    if (req.method !== 'GET' && req.method !== 'HEAD') return false;
    const path = (req.url ?? '/').split('?')[0]!;
    if (!Object.hasOwn(CONSOLE_FILES, path)) return false;
    try {
      assets ??= loadAssets();
    } catch {
      res.writeHead(503, { 'Content-Type': 'text/plain; charset=utf-8' });
      res.end('the console is not built: run `npm run build` (it writes dist/console/)\n');
      return true;
    }
    const asset = assets.get(path);
    if (!asset) return false;
    for (const [name, value] of Object.entries(SECURITY_HEADERS)) res.setHeader(name, value);
    res.setHeader('ETag', asset.etag);
    if (req.headers['if-none-match'] === asset.etag) {
      res.statusCode = 304;
      res.end();
      return true;
    }
    res.setHeader('Content-Type', asset.type);
    res.setHeader('Content-Length', asset.body.length);
    res.end(req.method === 'HEAD' ? undefined : asset.body);
    return true;
  };
}
