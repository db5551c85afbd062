// The ceiling for the control plane: a bare node:http server answering JSON, on the same runtime.

import { createServer } from 'node:http';

const port = Number(process.argv[2] ?? 0);
const server = createServer((_req, res) => {
  const body = JSON.stringify({ id: 1, name: 'hello', status: 'online' });
  res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
});
server.listen(port, '127.0.0.1', () =>
  console.log(
    JSON.stringify({ msg: 'listening', url: `http://127.0.0.1:${(server.address() as { port: number }).port}` }),
  ),
);
process.on('SIGTERM', () => server.close(() => process.exit(0)));
