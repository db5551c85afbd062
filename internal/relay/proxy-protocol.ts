// The PROXY protocol header (HAProxy's, versions 1 and 2) a relayed TCP connection starts with, so the target learns
// the client's address and port and the address the client connected to
// (https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt).

import { addressBytes } from '../schema/net.ts';

export interface Endpoint {
  address: string;
  port: number;
}

const V2_SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);
/** Version 2, command PROXY. */
const V2_PROXY = 0x21;
/** Version 2, command LOCAL: no addresses (the connection's own are to be used). */
const V2_LOCAL = 0x20;
/** Address family and transport: TCP over IPv4, TCP over IPv6. */
const TCP4 = 0x11;
const TCP6 = 0x21;

/** The header for a connection from `source` to `destination`; UNKNOWN (v1) or LOCAL (v2) where they cannot be told. */
export function proxyHeader(version: 'v1' | 'v2', source: Endpoint, destination: Endpoint): Buffer {
  const from = addressBytes(source.address);
  const to = addressBytes(destination.address);
  const known = from !== null && to !== null && from.length === to.length;
  if (version === 'v1') {
    if (!known) return Buffer.from('PROXY UNKNOWN\r\n');
    const text = (bytes: Buffer) =>
      bytes.length === 4
        ? [...bytes].join('.')
        : Array.from({ length: 8 }, (_, i) => bytes.readUInt16BE(i * 2).toString(16)).join(':');
    const family = from.length === 4 ? 'TCP4' : 'TCP6';
    return Buffer.from(`PROXY ${family} ${text(from)} ${text(to)} ${source.port} ${destination.port}\r\n`);
  }
  if (!known) return Buffer.concat([V2_SIGNATURE, Buffer.from([V2_LOCAL, 0x00, 0x00, 0x00])]);
  const ports = Buffer.alloc(4);
  ports.writeUInt16BE(source.port, 0);
  ports.writeUInt16BE(destination.port, 2);
  const addresses = Buffer.concat([from, to, ports]);
  const head = Buffer.from([V2_PROXY, from.length === 4 ? TCP4 : TCP6, 0, 0]);
  head.writeUInt16BE(addresses.length, 2);
  return Buffer.concat([V2_SIGNATURE, head, addresses]);
}
