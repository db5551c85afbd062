// Tunnels of transport ws through a real reverse proxy in HTTP mode, as a CDN or an ingress would stand in front of
// the exit: Debian's nginx and HAProxy on loopback, each started by the test with a config of its own, between the
// entry and the exit's port. The proxy sees a WebSocket at the via's path and nothing of the TLS inside it. Skips
// with the reason where a proxy is not installed (.ci/run installs both).

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { udpRoundTrip } from '../agents.ts';
import { selfSigned } from '../../internal/tls/certificate.ts';
import { freePort, tcpRoundTrip, until } from '../net.ts';
import { tunnelFleet, tunnelOf, untilCarrying } from '../tunnel-fleet.ts';

interface Proxy {
  port: number;
  /** How many WebSocket upgrades it passed on (101s), read from its own log, which has each once it ended. */
  upgrades: () => number;
}

function missing(binary: string): string | null {
  return spawnSync(binary, ['-v'], { stdio: 'ignore' }).error ? `${binary} is not installed` : null;
}

function run(t: TestContext, command: string, args: string[], dir: string): void {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], cwd: dir });
  const output: string[] = [];
  child.stdout.on('data', (chunk) => output.push(String(chunk)));
  child.stderr.on('data', (chunk) => output.push(String(chunk)));
  writeFileSync(join(dir, 'output.txt'), '');
  child.stdout.on('data', (chunk) => writeFileSync(join(dir, 'output.txt'), chunk, { flag: 'a' }));
  t.after(async () => {
    if (child.exitCode === null) {
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
    }
  });
  child.once('exit', (code) => {
    if (code !== 0 && code !== null) output.unshift(`${command} exited with ${code}:\n`);
  });
}

/**
 * nginx proxying `path` to the exit's port as a WebSocket, closing a connection idle for `idleSeconds`; serving TLS
 * with `tls` (a certificate and its key) when given.
 */
async function nginx(
  t: TestContext,
  exitPort: number,
  path: string,
  idleSeconds: number,
  tls?: { cert: string; key: string },
): Promise<Proxy> {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-nginx-'));
  t.after(() => spawnSync('rm', ['-rf', dir]));
  mkdirSync(join(dir, 'logs'));
  const port = await freePort();
  if (tls) {
    writeFileSync(join(dir, 'cert.pem'), tls.cert);
    writeFileSync(join(dir, 'key.pem'), tls.key, { mode: 0o600 });
  }
  writeFileSync(
    join(dir, 'nginx.conf'),
    `daemon off;
master_process off;
pid ${dir}/nginx.pid;
error_log ${dir}/logs/error.log warn;
events { worker_connections 256; }
http {
  access_log ${dir}/logs/access.log;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  server {
    listen 127.0.0.1:${port}${tls ? ' ssl' : ''};
    ${tls ? `ssl_certificate ${dir}/cert.pem; ssl_certificate_key ${dir}/key.pem;` : ''}
    location ${path} {
      proxy_pass http://127.0.0.1:${exitPort};
      proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection "upgrade";
      proxy_read_timeout ${idleSeconds}s;
      proxy_send_timeout ${idleSeconds}s;
    }
  }
}
`,
  );
  run(t, 'nginx', ['-p', dir, '-c', join(dir, 'nginx.conf')], dir);
  await listening(port, tls !== undefined);
  return { port, upgrades: () => upgradesIn(join(dir, 'logs', 'access.log')) };
}

/** HAProxy in HTTP mode sending `path` to the exit's port, ending a tunnel idle for `idleSeconds`. */
async function haproxy(t: TestContext, exitPort: number, path: string, idleSeconds: number): Promise<Proxy> {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-haproxy-'));
  t.after(() => spawnSync('rm', ['-rf', dir]));
  const port = await freePort();
  writeFileSync(
    join(dir, 'haproxy.cfg'),
    `global
  log stdout format raw local0
defaults
  mode http
  log global
  option httplog
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  timeout tunnel ${idleSeconds}s
frontend edge
  bind 127.0.0.1:${port}
  http-request deny unless { path_beg ${path} }
  default_backend exit
backend exit
  server exit 127.0.0.1:${exitPort}
`,
  );
  run(t, 'haproxy', ['-db', '-f', join(dir, 'haproxy.cfg')], dir);
  await listening(port);
  return { port, upgrades: () => upgradesIn(join(dir, 'output.txt')) };
}

/** How many WebSocket upgrades (101s) a proxy's log shows: each line of one, in nginx's and HAProxy's formats alike. */
function upgradesIn(log: string): number {
  return readFileSync(log, 'utf8')
    .split('\n')
    .filter((line) => / 101 /.test(line)).length;
}

async function listening(port: number, tls = false): Promise<void> {
  await until(`a proxy on ${port}`, async () => {
    try {
      if (tls) await tcpRoundTrip(port, Buffer.alloc(0));
      else await tcpRoundTrip(port, Buffer.from('GET / HTTP/1.0\r\n\r\n'));
      return true;
    } catch {
      return false;
    }
  });
}

const proxies = { nginx, haproxy };

describe('tunnels through reverse proxies', { concurrency: 4 }, () => {
  test(
    "a wss:// via is checked against the entry node's CAs: refused while the proxy's CA is unknown to it, " +
      'carrying once the agent trusts it (NODE_EXTRA_CA_CERTS)',
    async (t) => {
      const reason = missing('nginx');
      if (reason) return t.skip(reason);
      const certificate = selfSigned(['localhost'], { commonName: 'proxy' });
      const ca = join(mkdtempSync(join(tmpdir(), 'portplane-ca-')), 'ca.pem');
      writeFileSync(ca, certificate.cert);
      t.after(() => spawnSync('rm', ['-rf', dirname(ca)]));
      for (const trusted of [false, true]) {
        await t.test(trusted ? 'trusted' : 'unknown', async (t) => {
          const f = await tunnelFleet(t, {
            transport: 'ws',
            via: async (exitPort) => {
              const proxy = await nginx(t, exitPort, '/portplane/', 300, certificate);
              return `wss://localhost:${proxy.port}/portplane/t1`;
            },
            entryEnv: trusted ? { NODE_EXTRA_CA_CERTS: ca } : undefined,
          });
          if (!trusted) {
            const refused = await until('the entry to refuse the proxy', async () => {
              const tunnel = await tunnelOf(f.m, f.tunnel.id);
              return tunnel.ends.entry.last_error?.includes('certificate') && tunnel;
            });
            assert.match(refused.ends.entry.last_error, /^cannot reach the exit node through wss:\/\/localhost:/);
            assert.equal(refused.ends.entry.status, 'down');
            return;
          }
          await untilCarrying(f);
          const words = Buffer.from("through the proxy's TLS and the tunnel's");
          assert.ok((await tcpRoundTrip(f.tcpPort, words)).equals(words));
        });
      }
    },
  );

  for (const [name, start] of Object.entries(proxies)) {
    test(`through ${name} in HTTP mode, a ws tunnel carries TCP and UDP`, async (t) => {
      const reason = missing(name);
      if (reason) return t.skip(reason);
      let proxy: Proxy | undefined;
      const f = await tunnelFleet(t, {
        transport: 'ws',
        via: async (exitPort) => {
          proxy = await start(t, exitPort, '/portplane/', 300);
          return `ws://127.0.0.1:${proxy.port}/portplane/t1`;
        },
      });
      await untilCarrying(f);
      const payload = Buffer.alloc(4 * 1024 * 1024);
      for (let i = 0; i < payload.length; i += 4) payload.writeUInt32BE(i, i);
      assert.ok((await tcpRoundTrip(f.tcpPort, payload)).equals(payload));
      assert.deepEqual(await udpRoundTrip(f.udpPort, ['one', 'two', 'three']), ['one', 'three', 'two']);
      assert.equal((await tunnelOf(f.m, f.tunnel.id)).via, `ws://127.0.0.1:${proxy!.port}/portplane/t1`);
    });

    test(`when ${name} ends the tunnel's WebSocket as idle (101 twice in its log), the entry is back`, async (t) => {
      const reason = missing(name);
      if (reason) return t.skip(reason);
      let proxy: Proxy | undefined;
      // Shorter than the entry's PING interval (5 s): the proxy ends the session between two pings.
      const f = await tunnelFleet(t, {
        transport: 'ws',
        via: async (exitPort) => {
          proxy = await start(t, exitPort, '/portplane/', 2);
          return `ws://127.0.0.1:${proxy.port}/portplane/t1`;
        },
      });
      await untilCarrying(f);
      await until(`${name} to end an idle session and the entry to come back`, () => proxy!.upgrades() >= 2, 30_000);
      const tunnel = await until('the tunnel up again', async () => {
        const now = await tunnelOf(f.m, f.tunnel.id);
        return now.status === 'up' && now;
      });
      assert.equal(tunnel.ends.exit.status, 'up');
      const words = Buffer.from('after the proxy hung up');
      assert.ok((await tcpRoundTrip(f.tcpPort, words)).equals(words));
      assert.deepEqual(await udpRoundTrip(f.udpPort, ['again']), ['again']);
    });
  }
});
