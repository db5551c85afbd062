// What each node's rules carry at this moment (open connections and flows, and rates over the last report's
// interval), as their agents said in their last `live` round: kept in memory only, a gauge and never history. A node
// whose agent went away, or has not said for long, has nothing live.

/** A rule's numbers of the moment. */
export interface RuleLive {
  id: number;
  node_id: number;
  /** Its owner, for whose eyes it is. */
  owner_id: number;
  open: number;
  rate_in: number;
  rate_out: number;
}

interface NodeRound {
  round: number;
  atMs: number;
  rules: Map<number, RuleLive>;
}

export class LiveNumbers {
  private readonly nodes = new Map<number, NodeRound>();

  /**
   * A piece of node `nodeId`'s round `round` (a new round replaces the one before), at `atMs`. Returns whether it
   * tells anything: a rule carrying something, or the end of what the round before said.
   */
  take(nodeId: number, round: number, rules: readonly RuleLive[], atMs: number): boolean {
    let node = this.nodes.get(nodeId);
    const before = node?.rules.size ?? 0;
    if (!node || node.round !== round) this.nodes.set(nodeId, (node = { round, atMs, rules: new Map() }));
    node.atMs = atMs;
    for (const rule of rules) node.rules.set(rule.id, rule);
    return rules.length > 0 || before > 0;
  }

  /** Node `nodeId`'s agent went away: what it said carries nothing now. */
  forget(nodeId: number): void {
    this.nodes.delete(nodeId);
  }

  /** The numbers said within `freshMs` of `nowMs`, of every node's rules or of node `nodeId`'s alone. */
  rules(nowMs: number, freshMs: number, nodeId?: number): RuleLive[] {
    const rules: RuleLive[] = [];
    const one = nodeId === undefined ? undefined : this.nodes.get(nodeId);
    const nodes = nodeId === undefined ? this.nodes : one ? [[nodeId, one] as const] : [];
    for (const [id, node] of nodes) {
      if (nowMs - node.atMs > freshMs) this.nodes.delete(id);
      else rules.push(...node.rules.values());
    }
    return rules;
  }
}
