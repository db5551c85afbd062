// SQL for port claims: which rule or tunnel listens on which port of a node. The primary
// key makes a second claim of the same node, protocol and port impossible.

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

export class PortStore {
  private readonly holderStmt;
  private readonly claimRows;
  private readonly releaseRuleStmt;
  private readonly releaseTunnelStmt;
  private readonly tcpPortsStmt;

  constructor(db: Database) {
    this.holderStmt = db.prepare('SELECT * FROM port_claims WHERE node_id = ? AND protocol = ? AND port = ?');
    this.claimRows = db.insertRows('INSERT INTO port_claims (node_id, protocol, port, rule_id, tunnel_id) VALUES', 5);
    this.releaseRuleStmt = db.prepare('DELETE FROM port_claims WHERE rule_id = ?');
    this.releaseTunnelStmt = db.prepare('DELETE FROM port_claims WHERE tunnel_id = ?');
    this.tcpPortsStmt = db.prepare(
      "SELECT port FROM port_claims WHERE node_id = ? AND protocol = 'tcp' AND port BETWEEN ? AND ? ORDER BY port",
    );
  }

  /** The claim that holds `port` on the node for one of `transports`, other than `except`. */
  holder(
    nodeId: number,
    transports: Transport[],
    port: number,
    except: { rule_id?: number; tunnel_id?: number } = {},
  ): Claim | undefined {
    for (const transport of transports) {
      const claim = this.holderStmt.get(nodeId, transport, port) as Claim | undefined;
      if (
        claim &&
        !(except.rule_id !== undefined && claim.rule_id === except.rule_id) &&
        !(except.tunnel_id !== undefined && claim.tunnel_id === except.tunnel_id)
      ) {
        return claim;
      }
    }
    return undefined;
  }

  /** For rules that hold no port yet, whose ports are free. */
  claimForNewRules(rules: readonly { id: number; node_id: number; protocol: Protocol; listen_port: number }[]): void {
    this.claimRows(
      rules.flatMap((rule) =>
        transportsOf(rule.protocol).map((transport) => [rule.node_id, transport, rule.listen_port, rule.id, null]),
      ),
    );
  }

  /** For a rule that may hold ports already: they are released first. */
  claimForRule(ruleId: number, nodeId: number, transports: Transport[], port: number): void {
    this.releaseRuleStmt.run(ruleId);
    this.claimRows(transports.map((transport) => [nodeId, transport, port, ruleId, null]));
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
