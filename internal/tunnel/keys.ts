// The key pairs of a tunnel's ends (its entry, each exit), issued by the master: each end presents its own
// certificate and pins the other's key, so nobody else can stand in for either end.

import { selfSigned } from '../tls/certificate.ts';

export interface IssuedTunnelKeys {
  exit_cert: string;
  exit_key: Uint8Array;
  entry_cert: string;
  entry_key: Uint8Array;
}

/** Fresh key pairs for both ends of tunnel `id`, the private keys passed through `seal` for storage. */
export function issueTunnelKeys(id: number, seal: (privateKey: string) => Uint8Array): IssuedTunnelKeys {
  const exit = selfSigned([], { commonName: `portplane tunnel ${id} exit` });
  const entry = selfSigned([], { commonName: `portplane tunnel ${id} entry` });
  return { exit_cert: exit.cert, exit_key: seal(exit.key), entry_cert: entry.cert, entry_key: seal(entry.key) };
}

/** A fresh key pair for an exit of tunnel `id` past the first, at node `nodeId`, the private key sealed. */
export function issueExitKeys(
  id: number,
  nodeId: number,
  seal: (privateKey: string) => Uint8Array,
): { cert: string; key: Uint8Array } {
  const exit = selfSigned([], { commonName: `portplane tunnel ${id} exit ${nodeId}` });
  return { cert: exit.cert, key: seal(exit.key) };
}
