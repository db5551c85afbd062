// SQL for port claims: which rule or tunnel listens on which port of a node, a row per port (a rule's range claims
// each of its ports: a clash is then one look-up of the unique key, or a walk of it over the range). The unique key
// makes a second claim of the same node, protocol and port impossible. Triggers keep the claims from the rules and
// tunnels (see derived.ts), so that they cannot drift from them and a standby derives them itself: the table has no
// primary key, and the session recording what a primary commits passes over its rows (a range of a thousand ports
// is a thousand rows fewer to record and send).

import type { Transport } from '../domain/rules.ts';
import type { Database } from './database.ts';
import { trigger, type Derivation } from './trigger.ts';

export interface Claim {
  node_id: number;
  protocol: Transport;
  port: number;
  rule_id: number | null;
  tunnel_id: number | null;
}

/** The transports of rule `row`'s protocol (`NEW`, `OLD`, a table's), as rows of `value`. */
const transportsOfRow = (row: string) =>
  `json_each(CASE ${row}.protocol WHEN 'tcp+udp' THEN '["tcp","udp"]' ELSE json_array(${row}.protocol) END)`;

/** The claims of rule `row` (`NEW` or `OLD`): each transport of its protocol, each port of its range. */
const ruleClaims = (row: string) => `WITH RECURSIVE span(port) AS (
      SELECT ${row}.listen_port
      UNION ALL SELECT port + 1 FROM span WHERE port < coalesce(${row}.listen_port_end, ${row}.listen_port)
    )
    SELECT ${row}.node_id, transport.value, span.port, ${row}.id FROM span, ${transportsOfRow(row)} transport`;

const tunnelClaim = `INSERT INTO port_claims (node_id, protocol, port, tunnel_id)
      VALUES (NEW.exit_node_id, 'tcp', NEW.listen_port, NEW.id)`;

const moreExitClaim = `INSERT INTO port_claims (node_id, protocol, port, tunnel_id)
      VALUES (NEW.node_id, 'tcp', NEW.listen_port, NEW.tunnel_id)`;

const ruleMoved = `OLD.node_id IS NOT NEW.node_id OR OLD.protocol IS NOT NEW.protocol
    OR OLD.listen_port IS NOT NEW.listen_port OR OLD.listen_port_end IS NOT NEW.listen_port_end`;

export const portClaimDerivation: Derivation = {
  name: 'port_claims',
  triggers: [
    // Most rules claim one port of one protocol: a row, without the range's recursion (an import's 100,000 rules took
    // 10% longer through it).
    trigger(
      'port_claims_rule_insert',
      `AFTER INSERT ON rules WHEN NEW.listen_port_end IS NULL AND NEW.protocol <> 'tcp+udp' BEGIN
    INSERT INTO port_claims (node_id, protocol, port, rule_id)
      VALUES (NEW.node_id, NEW.protocol, NEW.listen_port, NEW.id);
  END`,
    ),
    trigger(
      'port_claims_rule_insert_span',
      `AFTER INSERT ON rules WHEN NEW.listen_port_end IS NOT NULL OR NEW.protocol = 'tcp+udp' BEGIN
    INSERT INTO port_claims (node_id, protocol, port, rule_id) ${ruleClaims('NEW')};
  END`,
    ),
    trigger(
      'port_claims_rule_delete',
      `AFTER DELETE ON rules BEGIN
    DELETE FROM port_claims WHERE rule_id = OLD.id;
  END`,
    ),
    trigger(
      'port_claims_rule_update',
      `AFTER UPDATE OF node_id, protocol, listen_port, listen_port_end ON rules WHEN ${ruleMoved} BEGIN
    DELETE FROM port_claims WHERE rule_id = OLD.id;
    INSERT INTO port_claims (node_id, protocol, port, rule_id) ${ruleClaims('NEW')};
  END`,
    ),
    trigger(
      'port_claims_tunnel_insert',
      `AFTER INSERT ON tunnels BEGIN
    ${tunnelClaim};
  END`,
    ),
    trigger(
      'port_claims_tunnel_delete',
      `AFTER DELETE ON tunnels BEGIN
    DELETE FROM port_claims WHERE tunnel_id = OLD.id;
  END`,
    ),
    trigger(
      'port_claims_tunnel_update',
      `AFTER UPDATE OF exit_node_id, listen_port ON tunnels
    WHEN OLD.exit_node_id IS NOT NEW.exit_node_id OR OLD.listen_port IS NOT NEW.listen_port BEGIN
    DELETE FROM port_claims WHERE tunnel_id = OLD.id AND node_id = OLD.exit_node_id;
    ${tunnelClaim};
  END`,
    ),
    // A tunnel's exits past the first claim their ports on their nodes alike.
    trigger(
      'port_claims_tunnel_exit_insert',
      `AFTER INSERT ON tunnel_exits BEGIN
    ${moreExitClaim};
  END`,
    ),
    trigger(
      'port_claims_tunnel_exit_delete',
      `AFTER DELETE ON tunnel_exits BEGIN
    DELETE FROM port_claims WHERE tunnel_id = OLD.tunnel_id AND node_id = OLD.node_id;
  END`,
    ),
    trigger(
      'port_claims_tunnel_exit_update',
      `AFTER UPDATE OF node_id, listen_port ON tunnel_exits
    WHEN OLD.node_id IS NOT NEW.node_id OR OLD.listen_port IS NOT NEW.listen_port BEGIN
    DELETE FROM port_claims WHERE tunnel_id = OLD.tunnel_id AND node_id = OLD.node_id;
    ${moreExitClaim};
  END`,
    ),
  ],
  derivedOnCopies: ['port_claims'],
  rebuild: `DELETE FROM port_claims;
    INSERT INTO port_claims (node_id, protocol, port, rule_id)
      WITH RECURSIVE span(id, port) AS (
        SELECT id, listen_port FROM rules
        UNION ALL SELECT span.id, span.port + 1 FROM span JOIN rules ON rules.id = span.id
          WHERE span.port < coalesce(rules.listen_port_end, rules.listen_port)
      )
      SELECT rules.node_id, transport.value, span.port, rules.id
        FROM span JOIN rules ON rules.id = span.id, ${transportsOfRow('rules')} transport;
    INSERT INTO port_claims (node_id, protocol, port, tunnel_id)
      SELECT exit_node_id, 'tcp', listen_port, id FROM tunnels;
    INSERT INTO port_claims (node_id, protocol, port, tunnel_id)
      SELECT node_id, 'tcp', listen_port, tunnel_id FROM tunnel_exits`,
};

export class PortStore {
  private readonly holderStmt;
  private readonly tcpPortsStmt;

  constructor(db: Database) {
    this.holderStmt = db.prepare(`SELECT * FROM port_claims
      WHERE node_id = :node AND protocol = :protocol AND port BETWEEN :first AND :last
        AND (rule_id IS NULL OR rule_id <> :rule) AND (tunnel_id IS NULL OR tunnel_id <> :tunnel)
      ORDER BY port LIMIT 1`);
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
