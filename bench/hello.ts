// The ceiling for the control plane: a bare node:http server on the same runtime answering every request with the
// very bytes the master answers a read with (its status, headers and body, captured by the bench into a file), so
// that the gap is the master's own work and not the size of what it sends.
// With CERT_FILE and KEY_FILE, over HTTPS (node:https), as the master serves off loopback.
// Usage: node --import tsx bench/hello.ts ANSWER_FILE [CERT_FILE KEY_FILE]

import { readFileSync } from 'node:fs';
import { createServer, type RequestListener } from 'node:http';
import { createServer as createTlsServer } from 'node:https';

const answer = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as {
  status: number;
  headers: Record<string, string>;
  body: string;
};
const body = Buffer.from(answer.body);
const [certFile, keyFile] = process.argv.slice(3);
const respond: RequestListener = (_req, res) => {
  res.writeHead(answer.status, answer.headers);
  res.end(body);
};
const server =
  certFile && keyFile
    ? createTlsServer({ cert: readFileSync(certFile), key: readFileSync(keyFile) }, respond)
    : createServer(respond);
const scheme = certFile ? 'https' : 'http';
server.listen(0, '127.0.0.1', () =>
  console.log(
    JSON.stringify({ msg: 'listening', url: `${scheme}://127.0.0.1:${(server.address() as { port: number }).port}` }),
  ),
);
process.on('SIGTERM', () => server.close(() => process.exit(0)));
