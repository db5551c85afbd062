// Tunnels' operations: an encrypted link from an entry node to an exit node, which rules on the entry node may relay
// through. Each end gets a key pair of its own; a tunnel moved to other nodes gets new ones.

import { grantedTunnel, reaches, unnamedToTenants } from './grants.ts';
import { TUNNEL_PORTS } from '../domain/link.ts';
import { DomainError, notFound, validationFailed } from '../errors/errors.ts';
import { checkIfMatch } from './etag.ts';
import type { FieldError } from '../schema/schema.ts';
import type { Tunnel, TunnelFields } from '../store/tunnels.ts';
import { issueTunnelKeys } from '../tunnel/keys.ts';
import { cascadeRules } from './rules.ts';
import { diff, type Change, type WriteDeps } from './write.ts';
import type { TunnelTransport } from '../domain/tunnels.ts';

/** A tunnel as written: `listen_port` null lets the master pick a free one on the exit node. */
export interface TunnelInput {
  name: string;
  /** null: the caller's (a new tunnel), or its owner as it is (a change). */
  owner_id: number | null;
  entry_node_id: number;
  exit_node_id: number;
  transport: TunnelTransport;
  /** Transport ws only: the WebSocket URL the entry dials (a reverse proxy in front of the exit). */
  via: string | null;
  listen_port: number | null;
}

/** Problems with the nodes a tunnel names, and a via without a WebSocket, as field errors under `prefix`. */
function tunnelReferenceErrors(
  app: WriteDeps,
  body: { entry_node_id: number; exit_node_id: number; transport: TunnelTransport; via: string | null },
  prefix = '#',
): FieldError[] {
  const errors: FieldError[] = [];
  if (body.via !== null && body.transport !== 'ws')
    errors.push({ pointer: `${prefix}/via`, detail: 'only with transport ws (a WebSocket is what a via carries)' });
  for (const key of ['entry_node_id', 'exit_node_id'] as const) {
    if (!app.store.nodes.find(body[key]))
      errors.push({ pointer: `${prefix}/${key}`, detail: `node ${body[key]} does not exist` });
  }
  if (body.entry_node_id === body.exit_node_id)
    errors.push({ pointer: `${prefix}/exit_node_id`, detail: 'must differ from entry_node_id' });
  return errors;
}

function resolvePort(
  app: WriteDeps,
  change: Change,
  ends: { entry_node_id: number; exit_node_id: number },
  requested: number | null,
  current?: Tunnel,
): number {
  const exitNodeId = ends.exit_node_id;
  const kept = requested ?? (current && current.exit_node_id === exitNodeId ? current.listen_port : null);
  const granted = grantedTunnel(app, change.caller, ends, kept, (first, last) =>
    app.store.tunnels.freePort(exitNodeId, first, last),
  );
  if (granted !== null) return granted;
  const port = app.store.tunnels.freePort(exitNodeId, TUNNEL_PORTS.min, TUNNEL_PORTS.max);
  if (port === null)
    throw new DomainError(
      'conflict',
      `node ${exitNodeId} has no free port in ${TUNNEL_PORTS.min}-${TUNNEL_PORTS.max}; give listen_port`,
    );
  return port;
}

/** Inside a transaction. Throws `validation_failed`, `conflict`. */
export function insertTunnel(app: WriteDeps, change: Change, body: TunnelInput): Tunnel {
  // A tenant's grants first: what lies outside them is not theirs to learn more of.
  const listenPort = resolvePort(app, change, body, body.listen_port);
  const errors = tunnelReferenceErrors(app, body);
  if (errors.length > 0) throw validationFailed(errors);
  const fields: TunnelFields = {
    name: body.name,
    owner_id: change.ownerFor(body.owner_id, null),
    entry_node_id: body.entry_node_id,
    exit_node_id: body.exit_node_id,
    transport: body.transport,
    via: body.via,
    listen_port: listenPort,
  };
  const tunnel = unnamedToTenants(app, change.caller, () => app.store.tunnels.insert(fields, app.timestamp()));
  app.store.tunnels.setPortPicked(tunnel.id, body.listen_port === null);
  app.store.tunnels.setKeys(
    tunnel.id,
    issueTunnelKeys(tunnel.id, (key) => app.box.seal(key)),
  );
  change.touchNode(tunnel.entry_node_id);
  change.touchNode(tunnel.exit_node_id);
  change.audit({ action: 'tunnel.create', resource: 'tunnel', resource_id: tunnel.id, changes: { after: fields } });
  return tunnel;
}

/**
 * Inside a transaction: replaces tunnel `id`. Moving its exit while rules use it needs rules:write; moving its entry
 * while it carries rules is a `conflict`. Throws `not_found`, `precondition_failed`, `validation_failed`,
 * `insufficient_scope`, `conflict` (the port, or the name).
 */
export function updateTunnel(app: WriteDeps, change: Change, id: number, body: TunnelInput, ifMatch?: string): Tunnel {
  const current = app.store.tunnels.find(id);
  if (!current || !reaches(change.caller, current.owner_id)) throw notFound('tunnel', id);
  checkIfMatch(ifMatch, current.version);
  const listenPort = resolvePort(app, change, body, body.listen_port, current);
  const errors = tunnelReferenceErrors(app, body);
  if (errors.length > 0) throw validationFailed(errors);
  const users = app.store.rules.idsOfTunnel(id);
  // Where the rules' connections leave for their targets is theirs to decide: moving it is editing them.
  if (body.exit_node_id !== current.exit_node_id && users.length > 0)
    change.requireScope(
      'rules:write',
      `moving the exit of tunnel ${id} changes where its ${users.length} rule(s) reach their targets from`,
    );
  if (body.entry_node_id !== current.entry_node_id && users.length > 0) {
    throw new DomainError(
      'conflict',
      `tunnel ${id} carries rules on node ${current.entry_node_id}; move or delete them before changing its ` +
        `entry node`,
      { data: { rule_ids: users } },
    );
  }
  const fields: TunnelFields = {
    name: body.name,
    owner_id: change.ownerFor(body.owner_id, current.owner_id),
    entry_node_id: body.entry_node_id,
    exit_node_id: body.exit_node_id,
    transport: body.transport,
    via: body.via,
    listen_port: listenPort,
  };
  let updated = unnamedToTenants(app, change.caller, () => app.store.tunnels.update(id, fields, app.timestamp()));
  // A port given is the giver's to keep; one picked (now, or before and kept) the master may move if it is taken.
  if (body.listen_port !== null || fields.listen_port !== current.listen_port)
    app.store.tunnels.setPortPicked(id, body.listen_port === null);
  const moved = fields.entry_node_id !== current.entry_node_id || fields.exit_node_id !== current.exit_node_id;
  // Keys go with the nodes they were issued to: a tunnel between other nodes gets new ones.
  if (moved) {
    app.store.tunnels.setKeys(
      id,
      issueTunnelKeys(id, (key) => app.box.seal(key)),
    );
    updated = app.store.tunnels.find(id)!;
  }
  // Its rules are to be applied again where the tunnel now ends or listens.
  if (moved || fields.listen_port !== current.listen_port)
    for (const ruleId of users) app.store.rules.markPending(ruleId);
  for (const nodeId of [current.entry_node_id, current.exit_node_id, updated.entry_node_id, updated.exit_node_id])
    change.touchNode(nodeId);
  change.audit({
    resource: 'tunnel',
    resource_id: id,
    changes: diff<TunnelFields>(current, fields, Object.keys(fields) as (keyof TunnelFields)[]),
  });
  return updated;
}

/** Inside a transaction. Without `cascade`, a tunnel rules still use is a `conflict`. */
export function removeTunnel(app: WriteDeps, change: Change, id: number, cascade: boolean, ifMatch?: string): void {
  const tunnel = app.store.tunnels.find(id);
  if (!tunnel || !reaches(change.caller, tunnel.owner_id)) throw notFound('tunnel', id);
  checkIfMatch(ifMatch, tunnel.version);
  const ruleIds = app.store.rules.idsOfTunnel(id);
  // A tenant's tunnel may carry an operator's rules, which are not the tenant's to see, nor to delete with it.
  if (
    change.caller.role === 'tenant' &&
    ruleIds.some((ruleId) => app.store.rules.find(ruleId)?.owner_id !== tunnel.owner_id)
  )
    throw new DomainError('conflict', `tunnel ${id} carries rules that are not yours: ask an operator`);
  if (ruleIds.length > 0 && !cascade) {
    throw new DomainError(
      'conflict',
      `tunnel ${id} is used by ${ruleIds.length} rule(s); delete them first or pass ?cascade=true`,
      { data: { rule_ids: ruleIds } },
    );
  }
  if (ruleIds.length > 0) change.requireScope('rules:write', `deleting tunnel ${id} deletes ${ruleIds.length} rule(s)`);
  cascadeRules(app, change, ruleIds, { tunnel: id });
  app.store.tunnels.delete(id);
  change.touchNode(tunnel.entry_node_id);
  change.touchNode(tunnel.exit_node_id);
  change.audit({ action: 'tunnel.delete', resource: 'tunnel', resource_id: id, changes: { before: tunnel } });
}
