// The ceiling for the control plane: a bare node:http server on the same runtime answering every request with the
// very bytes the master answers a read with (its status, headers and body, captured by the bench into a file), so
// that the gap is the master's own work and not the size of what it sends.
// Usage: node --import tsx bench/hello.ts ANSWER_FILE

import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';

const answer = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as {
  status: number;
  headers: Record<string, string>;
  body: string;
};
const body = Buffer.from(answer.body);
const server = createServer((_req, res) => {
  res.writeHead(answer.status, answer.headers);
  res.end(body);
});
server.listen(0, '127.0.0.1', () =>
  console.log(
    JSON.stringify({ msg: 'listening', url: `http://127.0.0.1:${(server.address() as { port: number }).port}` }),
  ),
);
process.on('SIGTERM', () => server.close(() => process.exit(0)));
