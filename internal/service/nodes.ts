// Nodes' operations: create (with its agent token, shown once), replace, and remove with what depends on them. SSH
// credentials are write-only and sealed at rest; the license caps how many nodes there may be.

import { hashSecret, newAgentToken } from '../auth/secrets.ts';
import { DomainError, notFound, validationFailed } from '../errors/errors.ts';
import { checkIfMatch } from './etag.ts';
import type { MasterDial } from '../install/agent-env.ts';
import type { Installer, InstallMode } from '../install/installer.ts';
import type { Node, NodeFields, SshSecret } from '../store/nodes.ts';
import { holdSecretInPlace, type SecretBinding } from './bound-secrets.ts';
import { cascadeRules } from './rules.ts';
import { holdNodeRules } from './standing.ts';
import { diff, transact, type Change, type Committer, type Requester, type WriteDeps } from './write.ts';

/** A node as written: its fields, and an SSH credential (absent: keep the stored one; null: remove it). */
export interface NodeInput extends NodeFields {
  ssh_private_key?: string | null;
  ssh_password?: string | null;
}

/** A node as the API shows it: all but its config version, which is the agent link's business. */
export function nodeView({ config_version: _, ...node }: Node) {
  return node;
}

/** A node's SSH credential goes to its host and port, for its user: it never follows the node elsewhere by itself. */
export const NODE_SECRET: SecretBinding = {
  label: 'SSH credential',
  given: ['ssh_private_key', 'ssh_password'],
  bound: ['host', 'ssh_port', 'ssh_user'],
  dropped: 'null for none',
};

function credentials(app: WriteDeps, body: NodeInput): SshSecret | 'keep' {
  if (typeof body.ssh_private_key === 'string' && typeof body.ssh_password === 'string') {
    throw validationFailed([
      { pointer: '#/ssh_password', detail: 'give either ssh_private_key or ssh_password, not both' },
    ]);
  }
  if (body.ssh_private_key === undefined && body.ssh_password === undefined) return 'keep';
  if (typeof body.ssh_private_key === 'string') return { auth: 'key', sealed: app.box.seal(body.ssh_private_key) };
  if (typeof body.ssh_password === 'string') return { auth: 'password', sealed: app.box.seal(body.ssh_password) };
  return { auth: 'none', sealed: null };
}

function fieldsOf(body: NodeInput) {
  return { name: body.name, host: body.host, ssh_port: body.ssh_port, ssh_user: body.ssh_user, tags: body.tags };
}

/** Creates a node inside a transaction; returns it with its agent token. Throws `license_limit`, `conflict`. */
export function insertNode(app: WriteDeps, change: Change, body: NodeInput): { node: Node; agent_token: string } {
  const license = app.licenseView();
  const limit = license.limits.max_nodes;
  if (limit !== null && app.store.nodes.count() >= limit) {
    throw new DomainError(
      'license_limit',
      `the ${license.edition} license allows ${limit} nodes; remove a node or install a license with a higher limit`,
    );
  }
  const secret = credentials(app, body);
  let agentToken = '';
  const node = app.store.nodes.insert(
    fieldsOf(body),
    secret === 'keep' ? { auth: 'none', sealed: null } : secret,
    (id) => hashSecret((agentToken = newAgentToken(id))),
    app.timestamp(),
  );
  change.audit({
    action: 'node.create',
    resource: 'node',
    resource_id: node.id,
    changes: { after: { ...nodeView(node), ssh_private_key: body.ssh_private_key, ssh_password: body.ssh_password } },
  });
  return { node, agent_token: agentToken };
}

/**
 * Inside a transaction: replaces node `id`'s fields, and its SSH credential when one is given. Throws `not_found`,
 * `precondition_failed`, `validation_failed` (a credential left behind by a move), `conflict` (the name).
 */
export function updateNode(app: WriteDeps, change: Change, id: number, body: NodeInput, ifMatch?: string): Node {
  const current = app.store.nodes.find(id);
  if (!current) throw notFound('node', id);
  checkIfMatch(ifMatch, current.version);
  const secret = credentials(app, body);
  if (current.ssh_auth !== 'none' && secret === 'keep') holdSecretInPlace(NODE_SECRET, current, body);
  const updated = app.store.nodes.update(id, fieldsOf(body), secret, app.timestamp());
  // Entry nodes dial their tunnels' exit at its host.
  if (updated.host !== current.host) {
    for (const tunnelId of app.store.tunnels.idsOfNode(id)) {
      const tunnel = app.store.tunnels.find(tunnelId)!;
      if (tunnel.exit_node_ids.includes(id)) change.touchNode(tunnel.entry_node_id);
    }
  }
  if (updated.tags.join() !== current.tags.join()) holdNodeRules(app, change, id);
  const changes = diff<Node>(current, updated, ['name', 'host', 'ssh_port', 'ssh_user', 'tags']);
  if (body.ssh_private_key !== undefined || body.ssh_password !== undefined) {
    Object.assign(changes.after, {
      ssh_auth: updated.ssh_auth,
      ssh_private_key: body.ssh_private_key,
      ssh_password: body.ssh_password,
    });
  }
  change.audit({ resource: 'node', resource_id: id, changes });
  return updated;
}

/**
 * Deletes a node inside a transaction. Without `cascade`, a node that still has rules or
 * tunnels is a `conflict`; with it, those go first, each with its own audit entry.
 */
export function removeNode(app: WriteDeps, change: Change, id: number, cascade: boolean, ifMatch?: string): void {
  const { store } = app;
  const node = store.nodes.find(id);
  if (!node) throw notFound('node', id);
  checkIfMatch(ifMatch, node.version);
  const tunnelIds = store.tunnels.idsOfNode(id);
  const ruleIds = [...new Set([...store.rules.idsOfNode(id), ...tunnelIds.flatMap((t) => store.rules.idsOfTunnel(t))])];
  if (!cascade && (ruleIds.length > 0 || tunnelIds.length > 0)) {
    throw new DomainError(
      'conflict',
      `node ${id} still has ${ruleIds.length} rule(s) and ${tunnelIds.length} tunnel(s); delete them first or ` +
        `pass ?cascade=true`,
      {
        data: { rule_ids: ruleIds, tunnel_ids: tunnelIds },
      },
    );
  }
  if (ruleIds.length > 0) change.requireScope('rules:write', `deleting node ${id} deletes ${ruleIds.length} rule(s)`);
  if (tunnelIds.length > 0)
    change.requireScope('tunnels:write', `deleting node ${id} deletes ${tunnelIds.length} tunnel(s)`);
  cascadeRules(app, change, ruleIds, { node: id }, id);
  for (const tunnelId of tunnelIds) {
    const tunnel = store.tunnels.find(tunnelId)!;
    store.tunnels.delete(tunnelId);
    for (const other of [tunnel.entry_node_id, ...tunnel.exit_node_ids]) if (other !== id) change.touchNode(other);
    change.audit({
      action: 'tunnel.delete',
      resource: 'tunnel',
      resource_id: tunnelId,
      changes: { before: tunnel, cascade_from: { node: id } },
    });
  }
  // Announced as a change, so that the node's agent link, finding the node gone, ends once this commits.
  change.touchNode(id);
  store.nodes.delete(id);
  change.audit({ action: 'node.delete', resource: 'node', resource_id: id, changes: { before: nodeView(node) } });
}

/**
 * Starts an install (or reinstall) of node `id`'s agent over SSH, audited with where its agent will dial: marks the
 * node installing once committed, then runs it in the background. Returns the node as it is then. Throws `not_found`,
 * `conflict` (an install already running, or an agent already installed for an install).
 */
export async function beginInstall(
  app: Committer & { installer: Installer },
  requester: Requester,
  id: number,
  mode: InstallMode,
  dial: MasterDial,
  forgetHostKey: boolean,
): Promise<Node> {
  const node = await transact(app, requester, (change) => {
    app.installer.markStarted(id, mode);
    change.audit({
      resource: 'node',
      resource_id: id,
      changes: { master_url: dial.masterUrl, master_pin: dial.pin, forget_host_key: forgetHostKey },
    });
    return app.store.nodes.find(id)!;
  });
  void app.installer.run(id, mode, dial, forgetHostKey);
  return node;
}
