// Export and import of the whole forwarding setup (nodes without secrets, tunnels, rules) as one document. Nodes and
// tunnels are referred to by name, which is unique, so a document can be imported into another master, or edited to
// move a dead node's rules. The API's schema (api/transfer.ts) validates the format; the compiler holds it to
// `ExportDocument`, the shape these operations read and write.

import { DomainError, validationFailed } from '../errors/errors.ts';
import type { FieldError } from '../schema/schema.ts';
import { ruleFieldNames, ruleFieldsOf, type Rule, type RuleFields } from '../domain/rules.ts';
import { ROWS_PER_INSERT } from '../store/database.ts';
import type { NodeFields } from '../store/nodes.ts';
import type { Claim } from '../store/ports.ts';
import { EVERY_RULE } from '../store/rules.ts';
import type { Store } from '../store/store.ts';
import { insertNode } from './nodes.ts';
import { insertRules } from './rules.ts';
import { insertTunnel } from './tunnels.ts';
import { exportAlerting, importAlerting, type ExportedAlertRule, type ExportedChannel } from './transfer-alerts.ts';
import {
  fieldErrorsUnder,
  writeInSteps,
  type Change,
  type InSteps,
  type JobDone,
  type WriteDeps,
  type WriteJob,
} from './write.ts';
import type { ExitStrategy, TunnelTransport } from '../domain/tunnels.ts';
import type { Unmapped } from '../formats/foreign.ts';

/** The document's `format`. */
export const EXPORT_FORMAT = 'portplane-export';
const ALL = Number.MAX_SAFE_INTEGER;

/**
 * An export document: nodes (without secrets), tunnels and rules, which refer to nodes and tunnels by name; alert
 * channels (without secrets) and alert rules (see transfer-alerts.ts), absent from documents made before alerts.
 */
export interface ExportDocument {
  format: string;
  version: number;
  exported_at?: string;
  nodes: NodeFields[];
  tunnels: {
    name: string;
    owner: string | null;
    entry_node: string;
    exit_node: string;
    listen_port: number;
    transport: TunnelTransport;
    /** Only where set (transport ws), as masters older than it read the rest. */
    via?: string | null;
    /** Version 2, only for a tunnel of several exits: every exit in order, with their ports and vias. */
    exit_nodes?: string[] | null;
    exit_ports?: (number | null)[] | null;
    exit_vias?: (string | null)[] | null;
    /** Version 2, only where not failover or null. */
    exit_strategy?: ExitStrategy;
    probe_target?: string | null;
  }[];
  rules: (Omit<RuleFields, 'owner_id' | 'node_id' | 'tunnel_id'> & {
    owner: string | null;
    node: string;
    tunnel: string | null;
  })[];
  channels?: ExportedChannel[];
  alert_rules?: ExportedAlertRule[];
}

/**
 * Everything as one export document in JSON, read in one snapshot of `store`. It grows with the data (200,000 rules
 * make tens of megabytes): cmd/master runs it in a worker thread on a connection of its own, so no request waits for
 * it.
 */
export function exportJson(store: Store, exportedAt: string): Buffer {
  return store.db.snapshot(() => Buffer.from(JSON.stringify(exportOf(store, exportedAt))));
}

function exportOf(store: Store, exportedAt: string): ExportDocument {
  const nodes = store.nodes.list({ afterId: 0, limit: ALL, status: null, tag: null, q: null });
  const tunnels = store.tunnels.list({ afterId: 0, limit: ALL, owner_id: null, node_id: null, status: null, q: null });
  const rules = store.rules.list({ afterId: 0, limit: ALL, ...EVERY_RULE });
  const nodeNames = new Map(nodes.map((n) => [n.id, n.name]));
  const usernames = store.users.usernames();
  const tunnelNames = new Map(tunnels.map((t) => [t.id, t.name]));
  const alerting = exportAlerting(store, { node: (id) => nodeNames.get(id), tunnel: (id) => tunnelNames.get(id) });
  return {
    format: EXPORT_FORMAT,
    version: 2,
    exported_at: exportedAt,
    nodes: nodes.map(({ name, host, ssh_port, ssh_user, tags }) => ({ name, host, ssh_port, ssh_user, tags })),
    tunnels: tunnels.map((t) => ({
      name: t.name,
      owner: usernames.get(t.owner_id) ?? null,
      entry_node: nodeNames.get(t.entry_node_id)!,
      exit_node: nodeNames.get(t.exit_node_id)!,
      listen_port: t.listen_port,
      transport: t.transport,
      ...(t.via === null ? {} : { via: t.via }),
      // A tunnel of one exit reads as version 1 wrote it; several are named in full.
      ...(t.exit_node_ids.length === 1
        ? {}
        : {
            exit_nodes: t.exit_node_ids.map((id) => nodeNames.get(id)!),
            exit_ports: t.exit_ports,
            exit_vias: t.exit_vias,
          }),
      ...(t.exit_strategy === 'failover' ? {} : { exit_strategy: t.exit_strategy }),
      ...(t.probe_target === null ? {} : { probe_target: t.probe_target }),
    })),
    rules: rules.map((rule) => {
      const { name, owner_id, node_id, tunnel_id, ...rest } = ruleFieldsOf(rule);
      return {
        name,
        owner: usernames.get(owner_id!) ?? null,
        node: nodeNames.get(node_id)!,
        tunnel: tunnel_id === null ? null : tunnelNames.get(tunnel_id)!,
        ...rest,
      };
    }),
    ...alerting,
  };
}

interface ImportResult {
  index: number;
  name: string;
  id: number | null;
  outcome: 'created' | 'exists' | 'invalid' | 'conflict';
  agent_token?: string;
  secret?: string;
}

/**
 * A name as SQLite's NOCASE compares it, which folds ASCII letters only: toLowerCase would
 * also make the Kelvin sign a k, and so a reference find a node the database would not.
 */
function nocase(name: string): string {
  return name.replace(/[A-Z]+/g, (letters) => letters.toLowerCase());
}

/** Whether `existing` is the rule `fields` describe (whoever owns it, where `fields` name no owner). */
function sameRule(existing: Rule, fields: RuleFields): boolean {
  return ruleFieldNames.every(
    (k) => (k === 'owner_id' && fields.owner_id === null) || JSON.stringify(existing[k]) === JSON.stringify(fields[k]),
  );
}

async function importAll(app: WriteDeps, change: Change, doc: ExportDocument, inSteps: InSteps) {
  const errors: FieldError[] = [];
  // The license limit is refused as it is everywhere (403 license_limit), not as one more invalid field.
  let overLicense = false;
  const nodeIds = new Map<string, number>();
  const tunnelIds = new Map<string, number>();
  // Names already on the master are looked up once: a document's rules mostly share a few nodes.
  const known = (ids: Map<string, number>, find: (name: string) => { id: number } | undefined) => (name: string) => {
    const key = nocase(name);
    let id = ids.get(key);
    if (id === undefined) {
      id = find(name)?.id;
      if (id !== undefined) ids.set(key, id);
    }
    return id;
  };
  const nodeId = known(nodeIds, (name) => app.store.nodes.findByName(name));
  const tunnelId = known(tunnelIds, (name) => app.store.tunnels.findByName(name));
  const ownerIds = new Map<string, number>();
  const ownerId = known(ownerIds, (name) => {
    const id = app.store.users.idOf(name);
    return id === undefined ? undefined : { id };
  });

  const attempt = <T>(pointer: string, fn: () => T, together = false): T | null => {
    try {
      return together ? change.attemptTogether(fn) : change.attempt(fn);
    } catch (error) {
      if (!(error instanceof DomainError) || !['validation_failed', 'conflict', 'license_limit'].includes(error.code))
        throw error;
      if (error.code === 'license_limit') overLicense = true;
      errors.push(...fieldErrorsUnder(pointer, error));
      return null;
    }
  };
  const missing = (pointer: string, kind: string, name: string) =>
    errors.push({ pointer, detail: `${kind} '${name}' is neither in this document nor on this master` });

  const importNode = (input: ExportDocument['nodes'][number], index: number): ImportResult => {
    const existing = app.store.nodes.findByName(input.name);
    if (existing) {
      nodeIds.set(nocase(input.name), existing.id);
      return { index, name: input.name, id: existing.id, outcome: 'exists' };
    }
    const made = attempt(`#/nodes/${index}`, () =>
      insertNode(app, change, { ...input, ssh_private_key: undefined, ssh_password: undefined }),
    );
    if (!made) return { index, name: input.name, id: null, outcome: 'invalid' };
    nodeIds.set(nocase(input.name), made.node.id);
    return { index, name: input.name, id: made.node.id, outcome: 'created', agent_token: made.agent_token };
  };

  const importTunnel = (input: ExportDocument['tunnels'][number], index: number): ImportResult => {
    const existing = app.store.tunnels.findByName(input.name);
    if (existing) {
      tunnelIds.set(nocase(input.name), existing.id);
      return { index, name: input.name, id: existing.id, outcome: 'exists' };
    }
    const entry = nodeId(input.entry_node);
    const exit = nodeId(input.exit_node);
    const exits = (input.exit_nodes ?? []).map((name: string, i: number) => {
      const id = nodeId(name);
      if (id === undefined) missing(`#/tunnels/${index}/exit_nodes/${i}`, 'node', name);
      return id;
    });
    const owner = input.owner === null ? null : ownerId(input.owner);
    if (entry === undefined) missing(`#/tunnels/${index}/entry_node`, 'node', input.entry_node);
    if (exit === undefined) missing(`#/tunnels/${index}/exit_node`, 'node', input.exit_node);
    if (owner === undefined) missing(`#/tunnels/${index}/owner`, 'user', input.owner!);
    if (entry === undefined || exit === undefined || owner === undefined || exits.includes(undefined))
      return { index, name: input.name, id: null, outcome: 'invalid' };
    const made = attempt(`#/tunnels/${index}`, () =>
      insertTunnel(app, change, {
        name: input.name,
        owner_id: owner,
        entry_node_id: entry,
        exit_node_id: exit,
        exit_node_ids: input.exit_nodes ? (exits as number[]) : null,
        exit_strategy: input.exit_strategy ?? 'failover',
        listen_port: input.listen_port,
        exit_ports: input.exit_ports ?? null,
        transport: input.transport,
        via: input.via ?? null,
        exit_vias: input.exit_vias ?? null,
        probe_target: input.probe_target ?? null,
      }),
    );
    if (!made) return { index, name: input.name, id: null, outcome: 'invalid' };
    tunnelIds.set(nocase(input.name), made.id);
    return { index, name: input.name, id: made.id, outcome: 'created' };
  };

  const importRule = (input: ExportDocument['rules'][number], index: number): ImportResult => {
    const node = nodeId(input.node);
    const tunnel = input.tunnel === null ? null : tunnelId(input.tunnel);
    const owner = input.owner === null ? null : ownerId(input.owner);
    if (node === undefined) missing(`#/rules/${index}/node`, 'node', input.node);
    if (tunnel === undefined) missing(`#/rules/${index}/tunnel`, 'tunnel', input.tunnel!);
    if (owner === undefined) missing(`#/rules/${index}/owner`, 'user', input.owner!);
    if (node === undefined || tunnel === undefined || owner === undefined)
      return { index, name: input.name, id: null, outcome: 'invalid' };
    const fields = ruleFieldsOf({ ...input, owner_id: owner, node_id: node, tunnel_id: tunnel });
    const holder = app.store.rules.portHolder(fields);
    const existing = holder?.rule_id != null ? app.store.rules.find(holder.rule_id) : undefined;
    if (existing && sameRule(existing, fields)) return { index, name: input.name, id: existing.id, outcome: 'exists' };
    const result: ImportResult = { index, name: input.name, id: null, outcome: 'created' };
    toCreate.push({ fields, result, holder });
    if (toCreate.length >= createTogether) createPending();
    return result;
  };

  // While items run without savepoints, new rules go in many at a time (a failure means a redo item by item);
  // item by item, one at a time, so that each fails alone.
  const createTogether = change.itemsTogether ? ROWS_PER_INSERT : 1;
  const toCreate: { fields: RuleFields; result: ImportResult; holder: Claim | undefined }[] = [];
  const createPending = () => {
    const batch = toCreate.splice(0);
    if (batch.length === 0) return;
    // Rules put off are judged after the items that followed them: any failure is redone item by item, where each
    // fails alone and the errors come in the document's order.
    const made = attempt(
      `#/rules/${batch[0]!.result.index}`,
      () =>
        insertRules(
          app,
          change,
          batch.map((item) => item.fields),
          batch.map((item) => item.holder),
        ),
      true,
    );
    for (const [i, { result, holder }] of batch.entries()) {
      if (made) result.id = made[i]!.id;
      else result.outcome = holder ? 'conflict' : 'invalid';
    }
  };

  // Item by item, in steps, as every bulk write (see `writeInSteps`).
  const results = {
    nodes: await inSteps(doc.nodes, importNode),
    tunnels: await inSteps(doc.tunnels, importTunnel),
    rules: await inSteps(doc.rules, importRule),
  };
  createPending();
  const alerting = importAlerting(
    app,
    change,
    doc.channels ?? [],
    doc.alert_rules ?? [],
    { node: nodeId, tunnel: tunnelId },
    attempt,
    errors,
  );
  Object.assign(results, alerting);
  if (errors.length > 0) {
    const failure = validationFailed(errors, `${errors.length} problem(s) in the document; nothing was imported`);
    const code = overLicense ? 'license_limit' : failure.code;
    throw new DomainError(code, failure.detail, { ...failure.facts, data: { results: stripTokens(results) } });
  }
  return results;
}

/** The results without the secrets made for created items (agent tokens, webhook secrets): a dry run or a failure. */
function stripTokens(results: Record<string, ImportResult[]>) {
  return Object.fromEntries(
    Object.entries(results).map(([key, items]) => [key, items.map(({ agent_token: _, secret: __, ...item }) => item)]),
  );
}

/** An import to run where the app's `importer` runs it: the document as sent, and who sends it. */
export interface ImportJob extends WriteJob {
  document: Uint8Array;
}

/**
 * A body decoded for an import: the document, and for another tool's config what did not map and where its rules came
 * from.
 */
export interface Decoded {
  document: ExportDocument;
  foreign?: { unmapped: Unmapped[]; lines: { rules: number[]; tunnels: number[] } };
}

/**
 * Decodes (with `decode`, the API's schema of the format), checks and writes a document, all or nothing, on `app`'s
 * own connection: the work of the importer's worker thread. Throws a DomainError for what the caller got wrong.
 */
export async function runImport(
  app: WriteDeps,
  job: ImportJob,
  decode: (document: Buffer) => Decoded,
): Promise<JobDone> {
  const { document, foreign } = decode(Buffer.from(job.document.buffer, job.document.byteOffset, job.document.length));
  // The answer is rendered before the commit: what could fail for memory fails while it can still be undone. It is
  // encoded here too, rather than on the event loop (7 MiB for 10,000 nodes and 100,000 rules).
  const { result: json, nodes } = await writeInSteps(
    app,
    job.requester,
    async (change, inSteps) => {
      const results = await importAll(app, change, document, inSteps);
      const shown = job.dryRun ? stripTokens(results) : results;
      if (foreign) {
        // Each item with its line in the source, the rules read, and what was not.
        for (const kind of ['rules', 'tunnels'] as const)
          shown[kind] = shown[kind]!.map((item, i) => ({ ...item, line: foreign.lines[kind][i] }));
        Object.assign(shown, { unmapped: foreign.unmapped, document });
      }
      return Buffer.from(JSON.stringify({ dry_run: job.dryRun, ...shown }));
    },
    job.dryRun,
    true,
  );
  return { status: 200, json, nodes };
}
