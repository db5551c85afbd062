// SQL for port claims: which rule or tunnel listens on which port of a node, a row per port (a rule's range claims
// each of its ports: a clash is then one look-up of the primary key, or a walk of it over the range). The primary
// key makes a second claim of the same node, protocol and port impossible.

import { lastPort, type PortSpan } from '../domain/ranges.ts';
import type { Database } from './database.ts';

export type Transport = 'tcp' | 'udp';

export interface Claim {
  node_id: number;
  protocol: Transport;
  port: number;
  rule_id: number | null;
  tunnel_id: number | null;
}

type Protocol = 'tcp' | 'udp' | 'tcp+udp';

export function transportsOf(protocol: Protocol): Transport[] {
  return protocol === 'tcp+udp' ? ['tcp', 'udp'] : [protocol];
}

function portsOf(span: PortSpan): number[] {
  const ports: number[] = [];
  for (let port = span.listen_port; port <= lastPort(span); port++) ports.push(port);
  return ports;
}

export class PortStore {
  private readonly holderStmt;
  private readonly claimRows;
  private readonly releaseRuleStmt;
  private readonly releaseTunnelStmt;
  private readonly tcpPortsStmt;

  constructor(db: Database) {
    this.holderStmt = db.prepare(`SELECT * FROM port_claims
      WHERE node_id = :node AND protocol = :protocol AND port BETWEEN :first AND :last
        AND (rule_id IS NULL OR rule_id <> :rule) AND (tunnel_id IS NULL OR tunnel_id <> :tunnel)
      ORDER BY port LIMIT 1`);
    this.claimRows = db.insertRows('INSERT INTO port_claims (node_id, protocol, port, rule_id, tunnel_id) VALUES', 5);
    this.releaseRuleStmt = db.prepare('DELETE FROM port_claims WHERE rule_id = ?');
    this.releaseTunnelStmt = db.prepare('DELETE FROM port_claims WHERE tunnel_id = ?');
    this.tcpPortsStmt = db.prepare(
      "SELECT port FROM port_claims WHERE node_id = ? AND protocol = 'tcp' AND port BETWEEN ? AND ? ORDER BY port",
    );
  }

  /** The claim that holds a port of `first`-`last` on the node for one of `transports`, other than `except`'s. */
  holder(
    nodeId: number,
    transports: Transport[],
    first: number,
    last = first,
    except: { rule_id?: number; tunnel_id?: number } = {},
  ): Claim | undefined {
    for (const protocol of transports) {
      const claim = this.holderStmt.get({
        node: nodeId,
        protocol,
        first,
        last,
        rule: except.rule_id ?? 0,
        tunnel: except.tunnel_id ?? 0,
      }) as Claim | undefined;
      if (claim) return claim;
    }
    return undefined;
  }

  /** For rules that hold no port yet, whose ports are free. */
  claimForNewRules(rules: readonly ({ id: number; node_id: number; protocol: Protocol } & PortSpan)[]): void {
    this.claimRows(
      rules.flatMap((rule) =>
        transportsOf(rule.protocol).flatMap((transport) =>
          portsOf(rule).map((port) => [rule.node_id, transport, port, rule.id, null]),
        ),
      ),
    );
  }

  /** For a rule that may hold ports already: they are released first. */
  claimForRule(ruleId: number, nodeId: number, transports: Transport[], span: PortSpan): void {
    this.releaseRuleStmt.run(ruleId);
    this.claimRows(
      transports.flatMap((transport) => portsOf(span).map((port) => [nodeId, transport, port, ruleId, null])),
    );
  }

  claimForTunnel(tunnelId: number, nodeId: number, port: number): void {
    this.releaseTunnelStmt.run(tunnelId);
    this.claimRows([[nodeId, 'tcp', port, null, tunnelId]]);
  }

  /** The lowest TCP port in [min, max] that nothing on the node claims, or null. */
  freeTcpPort(nodeId: number, min: number, max: number): number | null {
    let candidate = min;
    for (const { port } of this.tcpPortsStmt.all(nodeId, min, max) as { port: number }[]) {
      if (port !== candidate) break;
      candidate += 1;
    }
    return candidate <= max ? candidate : null;
  }
}
