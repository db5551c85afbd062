// Transport security with real processes on loopback: the master serving HTTPS with a given
// certificate or one it made itself, agents (the bundled program) that pin it and refuse
// anything else, key rotation by an announced next pin, and plain HTTP only where it is safe.

import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { connect as tlsConnect, createServer as createTlsServer } from 'node:tls';
import { selfSigned } from '../../internal/tls/certificate.ts';
import { pinOf } from '../../internal/tls/pin.ts';
import { call, certFiles, mintToken, node, rule, startMaster, type Running } from '../helpers.ts';
import { freePort, tcpEcho, tcpRoundTrip, until } from '../net.ts';
import { built } from '../dist.ts';

interface Program extends ChildProcess {
  output: string[];
}

/** Runs a bundled program (dist/*.mjs) and collects its stdout and stderr lines. */
function run(t: TestContext, program: 'agent' | 'master', args: string[], env: Record<string, string> = {}): Program {
  const child = spawn(process.execPath, [built(program), ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  }) as Program;
  child.output = [];
  for (const stream of [child.stdout!, child.stderr!])
    stream.setEncoding('utf8').on('data', (chunk: string) => child.output.push(...chunk.split('\n').filter(Boolean)));
  t.after(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return child;
}

async function logged(child: Program, pattern: RegExp, what: string): Promise<string> {
  try {
    return await until(what, () => child.output.find((line) => pattern.test(line)), 20_000);
  } catch (error) {
    throw new Error(
      `${(error as Error).message}; the program said:\n${child.output.join('\n')}\n(exit ${child.exitCode}, ` +
        `signal ${child.signalCode})`,
    );
  }
}

function agent(
  t: TestContext,
  master: string,
  token: string,
  extra: string[] = [],
  stateDir = mkdtempSync(join(tmpdir(), 'portplane-agent-')),
): Program & { stateDir: string } {
  return Object.assign(
    run(t, 'agent', ['--master', master, '--state-dir', stateDir, '--listen-host', '127.0.0.1', ...extra], {
      AGENT_TOKEN: token,
    }),
    { stateDir },
  );
}

/** The pin of the key a TLS server at `port` presents. */
async function presentedPin(port: number): Promise<string> {
  const socket = tlsConnect({ host: '127.0.0.1', port, rejectUnauthorized: false });
  await once(socket, 'secureConnect');
  const pin = pinOf(socket.getPeerX509Certificate()!);
  socket.destroy();
  return pin;
}

async function online(m: Running, id: number, token = m.admin) {
  return until(
    `node ${id} online`,
    async () => {
      const n = (await call(m.url, 'GET', `/api/nodes/${id}`, { token })).body;
      return n.status === 'online' && n;
    },
    20_000,
  );
}

test(
  'with a given certificate the master serves HTTPS (TLS 1.2+), and a new node comes with ' +
    'the pin and a command that starts its agent',
  async (t) => {
    const files = certFiles();
    const m = await startMaster(t, { tls: files });
    assert.match(m.url, /^https:\/\/127\.0\.0\.1:\d+$/);
    assert.equal(await presentedPin(Number(new URL(m.url).port)), files.pin);
    const created = await node(m, 'edge');
    assert.equal(created.master_pin, files.pin);
    assert.equal(
      created.agent_command,
      `AGENT_TOKEN='${created.agent_token}' node agent.mjs --master '${m.url}' --master-pin '${files.pin}'`,
    );
    // Nothing older than TLS 1.2 is spoken.
    const old = tlsConnect({
      host: '127.0.0.1',
      port: Number(new URL(m.url).port),
      rejectUnauthorized: false,
      maxVersion: 'TLSv1.1',
      minVersion: 'TLSv1',
    });
    const [error] = (await once(old, 'error')) as [NodeJS.ErrnoException];
    assert.match(String(error.code), /ERR_SSL/);
    // Over plain HTTP there is no pin, and the command says so.
    const plain = await startMaster(t);
    const bare = await node(plain, 'edge');
    assert.equal(bare.master_pin, null);
    assert.equal(bare.agent_command, `AGENT_TOKEN='${bare.agent_token}' node agent.mjs --master '${plain.url}'`);
  },
);

test(
  'off loopback without a certificate the master makes its own once, keeps it 0600 in the ' +
    'data dir, and logs the same pin after a restart',
  async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-data-'));
    const start = async () => {
      const master = run(t, 'master', ['--listen', '0.0.0.0:0', '--data-dir', dataDir], {
        MASTER_ADMIN_PASSWORD: 'admin-password-for-tests',
      });
      const line = JSON.parse(await logged(master, /"msg":"listening"/, 'the listening line')) as {
        url: string;
        tls_pin: string;
      };
      master.kill('SIGTERM');
      const [code] = await once(master, 'exit');
      assert.equal(code, 0);
      return line;
    };
    const first = await start();
    assert.match(first.url, /^https:\/\//);
    assert.equal(first.tls_pin, pinOf(readFileSync(join(dataDir, 'tls', 'cert.pem'))));
    for (const file of ['cert.pem', 'key.pem'])
      assert.equal(statSync(join(dataDir, 'tls', file)).mode & 0o777, 0o600, file);
    assert.equal((await start()).tls_pin, first.tls_pin, 'the same key after a restart');

    // Plain HTTP off loopback only when asked, and then with a warning.
    const insecure = run(
      t,
      'master',
      ['--listen', '0.0.0.0:0', '--data-dir', mkdtempSync(join(tmpdir(), 'portplane-data-')), '--insecure-http'],
      { MASTER_ADMIN_PASSWORD: 'admin-password-for-tests' },
    );
    const listening = JSON.parse(await logged(insecure, /"msg":"listening"/, 'the listening line')) as {
      url: string;
      tls_pin: string | null;
    };
    assert.match(listening.url, /^http:\/\//);
    assert.equal(listening.tls_pin, null);
    assert.ok(insecure.output.some((line) => /serving plain HTTP off loopback/.test(line)));
  },
);

test('an agent with the right pin links over TLS and forwards', async (t) => {
  const files = certFiles();
  const m = await startMaster(t, { tls: files, localTargets: true });
  const n = await node(m, 'edge');
  const echo = await tcpEcho(t);
  const port = await freePort();
  const r = (await rule(m, { node_id: n.id, listen_port: port, targets: [`127.0.0.1:${echo}`] })).body;
  agent(t, m.url, n.agent_token, ['--master-pin', files.pin]);
  await online(m, n.id);
  assert.equal((await call(m.url, 'POST', `/api/rules/${r.id}/sync`, { token: m.admin })).status, 200);
  assert.equal(
    (await tcpRoundTrip(port, Buffer.from('through a pinned master'))).toString(),
    'through a pinned master',
  );
});

test(
  'an agent pointed at an impostor sends it nothing and says why: a pin mismatch, or a ' +
    'certificate no CA vouches for',
  async (t) => {
    const impostorCert = selfSigned(['127.0.0.1']);
    const received: Buffer[] = [];
    let connections = 0;
    const impostor = createTlsServer({ cert: impostorCert.cert, key: impostorCert.key }, (socket) => {
      socket.on('data', (chunk) => received.push(chunk));
      socket.on('error', () => undefined);
    });
    impostor.on('connection', () => (connections += 1));
    impostor.on('tlsClientError', () => undefined);
    impostor.listen(0, '127.0.0.1');
    await once(impostor, 'listening');
    t.after(() => impostor.close());
    const url = `https://127.0.0.1:${(impostor.address() as { port: number }).port}`;
    const token = `mat_1_${'a'.repeat(43)}`;
    const realPin = certFiles().pin;

    const pinned = agent(t, url, token, ['--master-pin', realPin]);
    const refusal = await logged(pinned, /refusing the master/, 'the refusal');
    assert.match(refusal, /pin mismatch: the master presented sha256\/\S+, this agent pins sha256\//);
    assert.match(refusal, /nothing was sent/);
    const trusting = agent(t, url, token);
    assert.match(await logged(trusting, /cannot reach the master/, 'the CA refusal'), /unknown CA/);
    await until('both agents to have tried', () => connections >= 2);
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(Buffer.concat(received).length, 0, 'not one byte of a request, let alone the token');
  },
);

test(
  'plain HTTP to a master off this machine is refused at start unless --insecure-http; a ' +
    'master off loopback serves HTTPS unless --insecure-http',
  async (t) => {
    const token = `mat_1_${'a'.repeat(43)}`;
    // Refused before any connection is tried (192.0.2.1 is never dialled).
    const refused = spawnSync(process.execPath, [built('agent'), '--master', 'http://192.0.2.1:8080'], {
      encoding: 'utf8',
      env: { AGENT_TOKEN: token },
    });
    assert.equal(refused.status, 2);
    assert.match(refused.stderr, /in clear.*https:\/\/.*--insecure-http/);

    const wide = await startMaster(t, { host: '0.0.0.0' });
    assert.match(wide.url, /^https:\/\//);
    assert.ok(wide.app.tls, 'it made a certificate of its own');
    const insecure = await startMaster(t, { host: '0.0.0.0', insecureHttp: true });
    assert.match(insecure.url, /^http:\/\//);
    // Both are reached here through loopback only.
    const local = insecure.url.replace('0.0.0.0', '127.0.0.1');
    assert.equal((await call(local, 'GET', '/api/auth/me', { token: insecure.admin })).status, 200);
    // Agents of a master told --insecure-http may dial it in clear, and are told so; others may not.
    assert.equal(
      (
        await call(local, 'PATCH', '/api/settings', {
          token: insecure.admin,
          body: { install_master_url: 'http://203.0.113.5:8080' },
        })
      ).status,
      200,
    );
    const cleartext = (
      await call(local, 'POST', '/api/nodes', {
        token: insecure.admin,
        body: { name: 'edge', host: 'edge.example.net' },
      })
    ).body;
    assert.equal(
      cleartext.agent_command,
      `AGENT_TOKEN='${cleartext.agent_token}' node agent.mjs --master 'http://203.0.113.5:8080' --insecure-http`,
    );
    for (const m of [await startMaster(t), wide]) {
      const n = await node(m, 'edge');
      const answer = await call(m.url, 'POST', `/api/nodes/${n.id}/install-ssh`, {
        token: m.admin,
        body: { master_url: 'http://203.0.113.5:8080' },
      });
      assert.equal(answer.status, 422);
      assert.match(answer.body.errors[0].detail, /do not send their token in clear.*https:\/\//);
    }
    const socket = netConnect({ host: '127.0.0.1', port: Number(new URL(wide.url).port) });
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', () => undefined);
    await once(socket, 'connect');
    socket.end('GET /api/auth/me HTTP/1.1\r\nHost: x\r\n\r\n');
    await once(socket, 'close');
    assert.ok(
      !Buffer.concat(chunks).toString('latin1').startsWith('HTTP/'),
      'plain HTTP to the TLS listener gets no answer',
    );
  },
);

test('the master program reloads its certificate on SIGHUP and logs the new pin', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'portplane-data-'));
  const master = run(t, 'master', ['--listen', '0.0.0.0:0', '--data-dir', dataDir], {
    MASTER_ADMIN_PASSWORD: 'admin-password-for-tests',
  });
  const listening = JSON.parse(await logged(master, /"msg":"listening"/, 'the listening line')) as {
    url: string;
    tls_pin: string;
  };
  const renewed = selfSigned(['127.0.0.1']);
  writeFileSync(join(dataDir, 'tls', 'cert.pem'), renewed.cert);
  writeFileSync(join(dataDir, 'tls', 'key.pem'), renewed.key);
  master.kill('SIGHUP');
  const reloaded = JSON.parse(await logged(master, /reloaded the TLS certificate/, 'the reload')) as {
    tls_pin: string;
  };
  assert.equal(reloaded.tls_pin, pinOf(renewed.cert));
  assert.notEqual(reloaded.tls_pin, listening.tls_pin);
  assert.equal(await presentedPin(Number(new URL(listening.url).port)), reloaded.tls_pin);
  assert.equal(master.exitCode, null, 'still running');
});

test(
  'a renewed certificate is served after SIGHUP without a restart; a broken one leaves the ' + 'old in place',
  async (t) => {
    const files = certFiles();
    const m = await startMaster(t, { tls: files });
    const port = Number(new URL(m.url).port);
    const renewed = selfSigned(['127.0.0.1']);
    writeFileSync(files.certPath, renewed.cert);
    writeFileSync(files.keyPath, renewed.key);
    m.reloadTls();
    assert.equal(await presentedPin(port), pinOf(renewed.cert));
    writeFileSync(files.keyPath, selfSigned(['127.0.0.1']).key);
    m.reloadTls();
    assert.equal(
      await presentedPin(port),
      pinOf(renewed.cert),
      'a key that does not match is refused, the served one stays',
    );
    assert.equal(m.app.tls!.pin, pinOf(renewed.cert));
  },
);

test(
  'rotation: agents accept the key a master announced as tls_next_pin once it switches; an ' +
    'agent that never heard of it refuses',
  async (t) => {
    const before = certFiles();
    const after = certFiles();
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-data-'));
    const port = await freePort();
    const first = await startMaster(t, { tls: before, dataDir, port });
    const admin = await mintToken(first, ['*']);
    const n = await node(first, 'edge');
    const informed = agent(t, first.url, n.agent_token, ['--master-pin', before.pin]);
    await online(first, n.id);
    assert.equal(
      (await call(first.url, 'PATCH', '/api/settings', { token: admin, body: { tls_next_pin: after.pin } })).status,
      200,
    );
    await until('the agent to keep the announced pin', () => {
      try {
        return (JSON.parse(readFileSync(join(informed.stateDir, 'pins.json'), 'utf8')) as string[]).includes(after.pin);
      } catch {
        return false;
      }
    });
    await first.close();

    const second = await startMaster(t, { tls: after, dataDir, port });
    assert.equal(await presentedPin(port), after.pin);
    await online(second, n.id, admin);
    assert.ok(!informed.output.some((line) => /refusing the master/.test(line)));
    // A node that missed the announcement still pins the old key only: it refuses, and needs a reinstall or its
    // agent_command.
    const other = await node(second, 'late');
    const late = agent(t, second.url, other.agent_token, ['--master-pin', before.pin]);
    assert.match(await logged(late, /refusing the master/, 'the refusal'), /pin mismatch/);
  },
);

test('a withdrawn next pin is forgotten: the agent then refuses a master with that key', async (t) => {
  const before = certFiles();
  const after = certFiles();
  const dataDir = mkdtempSync(join(tmpdir(), 'portplane-data-'));
  const port = await freePort();
  const first = await startMaster(t, { tls: before, dataDir, port });
  const n = await node(first, 'edge');
  const informed = agent(t, first.url, n.agent_token, ['--master-pin', before.pin]);
  await online(first, n.id);
  const learned = () => {
    try {
      return JSON.parse(readFileSync(join(informed.stateDir, 'pins.json'), 'utf8')) as string[];
    } catch {
      return [];
    }
  };
  const announce = (pin: string | null) =>
    call(first.url, 'PATCH', '/api/settings', { token: first.admin, body: { tls_next_pin: pin } });
  assert.equal((await announce(after.pin)).status, 200);
  await until('the agent to keep the announced pin', () => learned().includes(after.pin));
  assert.equal((await announce(null)).status, 200);
  await until('the agent to forget the withdrawn pin', () => !learned().includes(after.pin));
  await first.close();
  await startMaster(t, { tls: after, dataDir, port });
  assert.match(await logged(informed, /refusing the master/, 'the refusal'), /pin mismatch/);
});

test('an agent checks what its master sends: a malformed config ends the link and is not applied', async (t) => {
  const port = await freePort();
  let links = 0;
  const stand = createHttpServer();
  stand.on('upgrade', (_req, socket) => {
    links += 1;
    socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: portplane-agent/1\r\nConnection: Upgrade\r\n\r\n');
    // A listen port out of range: an agent that cast this would try to bind it.
    const rule = { id: 1, protocol: 'tcp', listen_port: 70_000, targets: ['127.0.0.1:1'], strategy: 'round_robin' };
    const config = { type: 'config', version: 1, report_interval_seconds: 10, tcp_idle_timeout_seconds: 60 };
    const rest = { max_connections_per_source: 8, next_master_pin: null };
    socket.write(`${JSON.stringify({ ...config, ...rest, rules: [{ ...rule, enabled: true, tunnel_id: null }] })}\n`);
    socket.on('error', () => undefined);
  });
  stand.listen(port, '127.0.0.1');
  await once(stand, 'listening');
  t.after(() => stand.close());
  const child = agent(t, `http://127.0.0.1:${port}`, `mat_1_${'a'.repeat(43)}`);
  assert.match(
    await logged(child, /malformed config message/, 'the refusal'),
    /rules\/0\/listen_port must be between 1 and 65535/,
  );
  assert.ok(!child.output.some((line) => /applied config/.test(line)), 'nothing was applied');
  await until('a reconnect', () => links >= 2);
});

test("a pinned agent also refuses its master's key in a certificate that has expired, and says so", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-cert-'));
  const stale = selfSigned(['127.0.0.1'], { now: new Date(Date.now() - 3 * 365 * 86_400_000), years: 1 });
  const files = { certPath: join(dir, 'cert.pem'), keyPath: join(dir, 'key.pem') };
  writeFileSync(files.certPath, stale.cert);
  writeFileSync(files.keyPath, stale.key, { mode: 0o600 });
  const m = await startMaster(t, { tls: files });
  const n = await node(m, 'edge');
  const pinned = agent(t, m.url, n.agent_token, ['--master-pin', pinOf(stale.cert)]);
  assert.match(await logged(pinned, /refusing the master/, 'the refusal'), /certificate expired on/);
  assert.equal(
    (await call(m.url, 'GET', `/api/nodes/${n.id}`, { token: m.admin })).body.status,
    'new',
    'it never linked',
  );
});
