// Tunnels' operations: an encrypted link from an entry node to one exit node or several, which rules on the entry
// node may relay through. Each end gets a key pair of its own; an end moved to another node gets new ones.

import { grantedTunnel, reaches, rulePolicy, unnamedToTenants } from './grants.ts';
import { TUNNEL_PORTS } from '../domain/link.ts';
import { DomainError, notFound, validationFailed } from '../errors/errors.ts';
import { checkIfMatch } from './etag.ts';
import type { FieldError } from '../schema/schema.ts';
import type { Tunnel, TunnelFields } from '../store/tunnels.ts';
import { issueExitKeys, issueTunnelKeys } from '../tunnel/keys.ts';
import { isSrvName, parseTarget } from '../schema/net.ts';
import { targetRefusal } from '../domain/rules.ts';
import { cascadeRules } from './rules.ts';
import { diff, type Change, type WriteDeps } from './write.ts';
import type { ExitStrategy, TunnelTransport } from '../domain/tunnels.ts';

/**
 * A tunnel as written. Its exits are `exit_node_ids` or `exit_node_id` (the first), with their ports and vias in
 * the same order (`exit_ports`, `exit_vias`; `listen_port` and `via` are the first's). A port null lets the master
 * pick a free one on that exit's node, or keeps the one it has there.
 */
export interface TunnelInput {
  name: string;
  /** null: the caller's (a new tunnel), or its owner as it is (a change). */
  owner_id: number | null;
  entry_node_id: number;
  exit_node_id: number | null;
  exit_node_ids: number[] | null;
  exit_strategy: ExitStrategy;
  transport: TunnelTransport;
  /** Transport ws only: the WebSocket URL the entry dials (a reverse proxy in front of the exit). */
  via: string | null;
  exit_vias: (string | null)[] | null;
  listen_port: number | null;
  exit_ports: (number | null)[] | null;
  probe_target: string | null;
}

/** The exits of `body`, each with the port asked for (null: picked or kept) and its via; throws `validation_failed`. */
function exitsOf(body: TunnelInput): { node_id: number; port: number | null; via: string | null }[] {
  const errors: FieldError[] = [];
  const nodes = body.exit_node_ids ?? (body.exit_node_id === null ? [] : [body.exit_node_id]);
  if (nodes.length === 0) errors.push({ pointer: '#/exit_node_ids', detail: 'name at least one exit node' });
  if (body.exit_node_ids && body.exit_node_id !== null && body.exit_node_ids[0] !== body.exit_node_id)
    errors.push({ pointer: '#/exit_node_id', detail: 'must be the first of exit_node_ids (or left out)' });
  const firstOf = <T>(list: T[] | null, first: T | null, name: string, single: string): (T | null)[] => {
    if (list === null) return nodes.map((_, i) => (i === 0 ? first : null));
    if (list.length !== nodes.length)
      errors.push({ pointer: `#/${name}`, detail: `must name one per exit, in the order of exit_node_ids` });
    if (first !== null && list[0] !== first)
      errors.push({ pointer: `#/${single}`, detail: `must be the first of ${name} (or left out)` });
    return nodes.map((_, i) => list[i] ?? null);
  };
  const ports = firstOf(body.exit_ports, body.listen_port, 'exit_ports', 'listen_port');
  const vias = firstOf(body.exit_vias, body.via, 'exit_vias', 'via');
  if (errors.length > 0) throw validationFailed(errors);
  return nodes.map((node_id, i) => ({ node_id, port: ports[i]!, via: vias[i]! }));
}

/** Problems with the nodes a tunnel names, its vias and its probe target, as field errors. */
function tunnelReferenceErrors(
  app: WriteDeps,
  change: Change,
  body: TunnelInput,
  exits: readonly { node_id: number; via: string | null }[],
  owner: number,
): FieldError[] {
  const errors: FieldError[] = [];
  if (exits.some((exit) => exit.via !== null) && body.transport !== 'ws')
    errors.push({
      pointer: body.exit_vias ? '#/exit_vias' : '#/via',
      detail: 'only with transport ws (a WebSocket is what a via carries)',
    });
  if (!app.store.nodes.find(body.entry_node_id))
    errors.push({ pointer: '#/entry_node_id', detail: `node ${body.entry_node_id} does not exist` });
  const seen = new Set<number>();
  exits.forEach(({ node_id }, i) => {
    const pointer = exits.length > 1 || body.exit_node_ids ? `#/exit_node_ids/${i}` : '#/exit_node_id';
    if (!app.store.nodes.find(node_id)) errors.push({ pointer, detail: `node ${node_id} does not exist` });
    else if (node_id === body.entry_node_id) errors.push({ pointer, detail: 'must differ from entry_node_id' });
    else if (seen.has(node_id)) errors.push({ pointer, detail: `node ${node_id} is named twice` });
    seen.add(node_id);
  });
  if (body.probe_target !== null && !isSrvName(body.probe_target)) {
    // Dialled by every exit, as a rule's target would be: a tenant's held off what is local to the exit.
    const policy = rulePolicy(app, change.caller, owner);
    for (const { node_id } of exits) {
      const host = app.store.nodes.find(node_id)?.host;
      const refusal = host === undefined ? null : targetRefusal(parseTarget(body.probe_target)!.host, host, policy);
      if (refusal) {
        errors.push({ pointer: '#/probe_target', detail: refusal });
        break;
      }
    }
  }
  return errors;
}

/**
 * The port each exit listens on: the one asked for, or the one it has at that node already, or one the master picks
 * (within a tenant's plan); and the nodes whose port the master picked.
 */
function resolvePorts(
  app: WriteDeps,
  change: Change,
  entryNodeId: number,
  exits: readonly { node_id: number; port: number | null }[],
  current?: Tunnel,
): { ports: number[]; picked: Set<number> } {
  const picked = new Set<number>();
  const ports = exits.map(({ node_id, port: requested }) => {
    const had = current?.exits.find((exit) => exit.node_id === node_id);
    const kept = requested ?? had?.listen_port ?? null;
    const granted = grantedTunnel(
      app,
      change.caller,
      { entry_node_id: entryNodeId, exit_node_id: node_id },
      kept,
      (first, last) => app.store.tunnels.freePort(node_id, first, last),
    );
    const wasPicked = had !== undefined && current !== undefined && portPicked(app, current, node_id);
    if (requested === null && (had === undefined || wasPicked)) picked.add(node_id);
    if (granted !== null) return granted;
    const port = app.store.tunnels.freePort(node_id, TUNNEL_PORTS.min, TUNNEL_PORTS.max);
    if (port === null)
      throw new DomainError(
        'conflict',
        `node ${node_id} has no free port in ${TUNNEL_PORTS.min}-${TUNNEL_PORTS.max}; give its port`,
      );
    return port;
  });
  return { ports, picked };
}

function portPicked(app: WriteDeps, tunnel: Tunnel, nodeId: number): boolean {
  return tunnel.exit_node_id === nodeId
    ? app.store.tunnels.firstPortPicked(tunnel.id)
    : app.store.tunnels.exitPortPicked(tunnel.id, nodeId);
}

/** The fields to store for `body`, its exits resolved. */
function fieldsOf(
  body: TunnelInput,
  owner: number,
  exits: readonly { node_id: number; via: string | null }[],
  ports: readonly number[],
): TunnelFields {
  const all = exits.map(({ node_id, via }, i) => ({ node_id, listen_port: ports[i]!, via }));
  return {
    name: body.name,
    owner_id: owner,
    entry_node_id: body.entry_node_id,
    exit_node_id: all[0]!.node_id,
    transport: body.transport,
    via: all[0]!.via,
    listen_port: all[0]!.listen_port,
    more_exits: all.slice(1),
    exit_strategy: body.exit_strategy,
    probe_target: body.probe_target,
  };
}

/** Issues key pairs to the exits past the first that have none (new ones). */
function keyNewExits(app: WriteDeps, id: number): void {
  for (const nodeId of app.store.tunnels.keylessExits(id))
    app.store.tunnels.setExitKeys(
      id,
      nodeId,
      issueExitKeys(id, nodeId, (key) => app.box.seal(key)),
    );
}

/** The nodes a tunnel runs on: its entry and every exit. */
export function nodesOf(tunnel: Pick<Tunnel, 'entry_node_id' | 'exit_node_ids'>): number[] {
  return [tunnel.entry_node_id, ...tunnel.exit_node_ids];
}

/** What the audit log keeps of a tunnel's fields: its exits as the API names them. */
function audited(fields: TunnelFields) {
  const { more_exits, ...rest } = fields;
  const exits = [{ node_id: fields.exit_node_id, listen_port: fields.listen_port, via: fields.via }, ...more_exits];
  return {
    ...rest,
    exit_node_ids: exits.map((exit) => exit.node_id),
    exit_ports: exits.map((exit) => exit.listen_port),
    exit_vias: exits.map((exit) => exit.via),
  };
}

/** Inside a transaction. Throws `validation_failed`, `conflict`. */
export function insertTunnel(app: WriteDeps, change: Change, body: TunnelInput): Tunnel {
  const exits = exitsOf(body);
  // A tenant's grants first: what lies outside them is not theirs to learn more of.
  const { ports, picked } = resolvePorts(app, change, body.entry_node_id, exits);
  const owner = change.ownerFor(body.owner_id, null);
  const errors = tunnelReferenceErrors(app, change, body, exits, owner);
  if (errors.length > 0) throw validationFailed(errors);
  const fields = fieldsOf(body, owner, exits, ports);
  const tunnel = unnamedToTenants(app, change.caller, () => app.store.tunnels.insert(fields, app.timestamp(), picked));
  app.store.tunnels.setPortPicked(tunnel.id, picked.has(fields.exit_node_id));
  app.store.tunnels.setKeys(
    tunnel.id,
    issueTunnelKeys(tunnel.id, (key) => app.box.seal(key)),
  );
  keyNewExits(app, tunnel.id);
  for (const nodeId of nodesOf(tunnel)) change.touchNode(nodeId);
  change.audit({
    action: 'tunnel.create',
    resource: 'tunnel',
    resource_id: tunnel.id,
    changes: { after: audited(fields) },
  });
  return app.store.tunnels.find(tunnel.id)!;
}

/**
 * Inside a transaction: replaces tunnel `id`. Changing its exits while rules use it needs rules:write; moving its
 * entry while it carries rules is a `conflict`. Throws `not_found`, `precondition_failed`, `validation_failed`,
 * `insufficient_scope`, `conflict` (a port, or the name).
 */
export function updateTunnel(app: WriteDeps, change: Change, id: number, body: TunnelInput, ifMatch?: string): Tunnel {
  const current = app.store.tunnels.find(id);
  if (!current || !reaches(change.caller, current.owner_id)) throw notFound('tunnel', id);
  checkIfMatch(ifMatch, current.version);
  const exits = exitsOf(body);
  const { ports, picked } = resolvePorts(app, change, body.entry_node_id, exits, current);
  const owner = change.ownerFor(body.owner_id, current.owner_id);
  const errors = tunnelReferenceErrors(app, change, body, exits, owner);
  if (errors.length > 0) throw validationFailed(errors);
  const users = app.store.rules.idsOfTunnel(id);
  const fields = fieldsOf(body, owner, exits, ports);
  const exitNodes = exits.map((exit) => exit.node_id);
  // Where the rules' connections leave for their targets is theirs to decide: changing it is editing them.
  const exitsMoved =
    exitNodes.join() !== current.exit_node_ids.join() ||
    fields.exit_strategy !== current.exit_strategy ||
    fields.probe_target !== current.probe_target;
  if (exitsMoved && users.length > 0)
    change.requireScope(
      'rules:write',
      `changing the exits of tunnel ${id} changes where its ${users.length} rule(s) reach their targets from`,
    );
  if (body.entry_node_id !== current.entry_node_id && users.length > 0) {
    throw new DomainError(
      'conflict',
      `tunnel ${id} carries rules on node ${current.entry_node_id}; move or delete them before changing its ` +
        `entry node`,
      { data: { rule_ids: users } },
    );
  }
  unnamedToTenants(app, change.caller, () => app.store.tunnels.update(id, fields, app.timestamp(), picked));
  app.store.tunnels.setPortPicked(id, picked.has(fields.exit_node_id));
  const moved = fields.entry_node_id !== current.entry_node_id || fields.exit_node_id !== current.exit_node_id;
  // Keys go with the nodes they were issued to: an entry or first exit on another node gets new ones.
  if (moved)
    app.store.tunnels.setKeys(
      id,
      issueTunnelKeys(id, (key) => app.box.seal(key)),
    );
  keyNewExits(app, id);
  const updated = app.store.tunnels.find(id)!;
  // Its rules are to be applied again where the tunnel now ends or listens.
  const listening = (tunnel: Tunnel) => JSON.stringify(tunnel.exits.map((exit) => [exit.node_id, exit.listen_port]));
  if (moved || listening(updated) !== listening(current))
    for (const ruleId of users) app.store.rules.markPending(ruleId);
  for (const nodeId of new Set([...nodesOf(current), ...nodesOf(updated)])) change.touchNode(nodeId);
  const before = audited({ ...current, more_exits: current.exits.slice(1) });
  const after = audited(fields);
  change.audit({
    resource: 'tunnel',
    resource_id: id,
    changes: diff(before, after, Object.keys(after) as (keyof typeof after)[]),
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
  for (const nodeId of nodesOf(tunnel)) change.touchNode(nodeId);
  change.audit({ action: 'tunnel.delete', resource: 'tunnel', resource_id: id, changes: { before: tunnel } });
}
