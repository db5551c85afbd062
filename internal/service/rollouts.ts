// Rollouts: a signed agent bundle taken to nodes in waves. The operations (create, pause, resume, abort), and the
// rollout at work on the master's clock: each second, the wave under way tells its waiting nodes to upgrade (at most
// MAX_UPGRADING at once, each sent the bundle over its link), and a node passes its gate once its agent linked again
// with the new version, applied its config and has no more rules with a target down than before. A node that fails
// (refused the bundle, rolled back by its own watchdog, silent past its gate, offline for a gate's time) halts the
// rollout with the reason; once every node of a wave passed, the next starts pause_seconds later. Every step is
// audited, and journalled (store/events.ts).

import { DomainError, notFound, validationFailed } from '../errors/errors.ts';
import type { UpgradeMessage } from '../domain/link.ts';
import type { Rollout, RolloutNode, WaveSize } from '../store/rollouts.ts';
import { theMaster } from './master.ts';
import { versionOrder } from '../release/signature.ts';
import { transact, type Change, type Committer, type WriteDeps } from './write.ts';
import type { RolloutState } from '../domain/rollouts.ts';

/** Finished rollouts kept (with where each of their nodes stood); older ones go when a rollout is made. */
export const MAX_ROLLOUTS_KEPT = 100;
export const MAX_WAVES = 20;
/** Nodes of a wave told to upgrade at once, at most: each is sent the bundle. */
export const MAX_UPGRADING = 50;
/** ... and at most this much bundle on its way to them at once (four of the largest bundles, 50 of today's). */
const UPGRADING_BYTES = 64 * 1024 * 1024;
/**
 * Past a node's gate, how long the master waits to hear from it (its watchdog rolled it back and it linked again to
 * say so) before it calls the node failed itself.
 */
export const GATE_GRACE_SECONDS = 15;

export interface RolloutPlan {
  version: string;
  node_ids: number[];
  waves: WaveSize[];
  gate_seconds: number;
  soak_seconds: number;
  pause_seconds: number;
}

/**
 * The nodes of each wave, in id order: a count takes that many, a share ("25%") that share of all the nodes
 * (rounded up), each from those no earlier wave took. Throws `validation_failed` when the waves leave nodes out.
 */
export function wavesOf(nodeIds: readonly number[], waves: readonly WaveSize[]): number[][] {
  const sorted = [...nodeIds].sort((a, b) => a - b);
  let taken = 0;
  const out = waves.map((size) => {
    const count = typeof size === 'number' ? size : Math.ceil((sorted.length * Number.parseInt(size, 10)) / 100);
    const wave = sorted.slice(taken, taken + count);
    taken += wave.length;
    return wave;
  });
  if (taken < sorted.length)
    throw validationFailed([
      {
        pointer: '#/waves',
        detail: `the waves take ${taken} of the ${sorted.length} nodes: end with "100%" to take the rest`,
      },
    ]);
  return out;
}

/** Inside a transaction. Throws `validation_failed`, `conflict` (a rollout under way). */
export function createRollout(app: WriteDeps, change: Change, plan: RolloutPlan): Rollout {
  const { store } = app;
  if (!store.bundles.findVersion(plan.version))
    throw validationFailed([
      {
        pointer: '#/version',
        detail: `the master carries no bundle of ${plan.version}: give it one (POST /api/agent-bundles)`,
      },
    ]);
  if (plan.node_ids.length === 0) throw validationFailed([{ pointer: '#', detail: 'selects no node' }]);
  const missing = plan.node_ids.findIndex((id) => !store.nodes.exists(id));
  if (missing >= 0)
    throw validationFailed([{ pointer: `#/ids/${missing}`, detail: `node ${plan.node_ids[missing]} does not exist` }]);
  const waves = wavesOf(plan.node_ids, plan.waves);
  const underWay = store.rollouts.underWay();
  if (underWay)
    throw new DomainError('conflict', `rollout ${underWay.id} is ${underWay.state}: let it finish, or abort it`);
  const id = store.rollouts.insert(plan, waves, app.timestamp());
  store.rollouts.prune(MAX_ROLLOUTS_KEPT);
  const { version, gate_seconds, soak_seconds, pause_seconds } = plan;
  const after = { version, waves: plan.waves, gate_seconds, soak_seconds, pause_seconds, nodes: plan.node_ids.length };
  change.audit({ action: 'rollout.create', resource: 'rollout', resource_id: id, changes: { after } });
  return store.rollouts.find(id)!;
}

export type Steer = 'pause' | 'resume' | 'abort';

/** From which states each order moves a rollout, and to which. */
const STEERING: Record<Steer, { from: readonly RolloutState[]; to: RolloutState; done: string }> = {
  pause: { from: ['running'], to: 'paused', done: 'paused' },
  resume: { from: ['paused', 'halted'], to: 'running', done: 'resumed' },
  abort: { from: ['running', 'paused', 'halted'], to: 'aborted', done: 'aborted' },
};

/**
 * Inside a transaction: pauses (no node is told to upgrade; those upgrading finish), resumes (a halted rollout tries
 * its failed nodes again) or aborts one. Throws `not_found`, `conflict` (its state does not allow it).
 */
export function steerRollout(app: WriteDeps, change: Change, id: number, steer: Steer): Rollout {
  const { store } = app;
  const rollout = store.rollouts.find(id);
  if (!rollout) throw notFound('rollout', id);
  const { from, to, done } = STEERING[steer];
  if (!from.includes(rollout.state))
    throw new DomainError('conflict', `rollout ${id} is ${rollout.state}: it cannot be ${done}`);
  if (steer === 'resume') {
    const underWay = store.rollouts.underWay();
    if (underWay && underWay.id !== id)
      throw new DomainError('conflict', `rollout ${underWay.id} is ${underWay.state}: one rollout at a time`);
    store.rollouts.retryFailed(id);
  }
  const halted = rollout.state === 'halted' ? `; it had halted: ${rollout.reason}` : '';
  const reason = steer === 'abort' ? `aborted by an operator${halted}` : steer === 'resume' ? null : rollout.reason;
  store.rollouts.setState(id, to, reason, app.timestamp());
  change.audit({
    action: `rollout.${steer}`,
    resource: 'rollout',
    resource_id: id,
    changes: { before: { state: rollout.state }, after: { state: to } },
  });
  return store.rollouts.find(id)!;
}

/** What the rollout at work needs of the master: writing, and its clock in milliseconds. */
export interface RolloutDriver extends Committer {
  clock: { now(): number };
}

/** Moves the rollout under way on by what its nodes did since the last turn (see the top of this file). */
export async function advanceRollouts(app: RolloutDriver): Promise<void> {
  const running = app.store.rollouts.underWay();
  if (running?.state !== 'running') return;
  await transact(app, theMaster('rollout.advance'), (change) => {
    const rollout = app.store.rollouts.underWay();
    if (rollout?.state === 'running') advance(app, change, rollout);
  });
}

function advance(app: RolloutDriver, change: Change, rollout: Rollout): void {
  const { store, sync } = app;
  const now = app.clock.now();
  const at = app.timestamp();
  const bundle = store.bundles.findVersion(rollout.version);
  const nodes = store.rollouts.unfinished(rollout.id, rollout.wave, MAX_UPGRADING * 2);
  let upgrading = nodes.filter((node) => node.state === 'upgrading').length;
  const atOnce = bundle ? Math.max(1, Math.min(MAX_UPGRADING, Math.floor(UPGRADING_BYTES / bundle.size))) : 1;
  const ordered: number[] = [];
  let failure: string | null = null;
  const settle = (node: RolloutNode, state: 'passed' | 'failed' | 'upgrading', detail: string | null) => {
    const started = state === 'upgrading';
    store.rollouts.setNode(rollout.id, node.node_id, {
      state,
      detail,
      finished: started ? null : at,
      ...(started ? { started: at, unhealthy: store.rollouts.unhealthyRules(node.node_id) } : {}),
    });
    change.audit({
      action: 'rollout.node',
      resource: 'rollout',
      resource_id: rollout.id,
      changes: { node_id: node.node_id, before: { state: node.state }, after: { state, detail } },
    });
    if (state === 'failed' && failure === null) failure = `node ${node.node_id}: ${detail}`;
  };
  for (const node of nodes) {
    if (failure !== null) break;
    if (node.state === 'failed') failure = `node ${node.node_id}: ${node.detail}`;
    else if (node.state === 'upgrading') {
      const outcome = gate(app, rollout, node, now);
      if (outcome === 'soaking') store.rollouts.startSoak(rollout.id, node.node_id, at, sync.linkOf(node.node_id)!);
      else if (outcome) settle(node, outcome.state, outcome.detail);
    } else if (upgrading < atOnce) {
      const found = store.nodes.find(node.node_id);
      if (!found || !sync.isConnected(node.node_id)) {
        // A node whose link is down a moment (a restart, the network) is waited for, up to a gate.
        if (now > Date.parse(rollout.wave_started_at) + rollout.gate_seconds * 1000)
          settle(node, 'failed', `offline since its wave began, over ${rollout.gate_seconds} s ago`);
      } else if (found.agent_version === rollout.version) settle(node, 'passed', `runs ${rollout.version} already`);
      else if ((versionOrder(found.agent_version ?? '') ?? '') > (versionOrder(rollout.version) ?? ''))
        settle(node, 'failed', `runs ${found.agent_version}, newer: a rollout never goes back (reinstall does)`);
      else if (!bundle) settle(node, 'failed', `the master no longer carries a bundle of ${rollout.version}`);
      else if (!found.agent_release_keys.includes(bundle.key_id))
        settle(
          node,
          'failed',
          `its agent does not trust release key ${bundle.key_id}, which signed ${rollout.version}: reinstall it`,
        );
      else {
        settle(node, 'upgrading', null);
        ordered.push(node.node_id);
        upgrading++;
      }
    }
  }
  if (failure !== null) {
    store.rollouts.setState(rollout.id, 'halted', failure, at);
    change.audit({ action: 'rollout.halt', resource: 'rollout', resource_id: rollout.id, changes: { failure } });
  } else if (nodes.length === 0) {
    if (rollout.wave_passed_at === null) store.rollouts.setWave(rollout.id, rollout.wave, at, at);
    else if (now >= Date.parse(rollout.wave_passed_at) + rollout.pause_seconds * 1000) {
      const last = rollout.wave + 1 >= rollout.waves.length;
      if (last) store.rollouts.setState(rollout.id, 'done', null, at);
      else store.rollouts.setWave(rollout.id, rollout.wave + 1, null, at);
      change.audit({
        action: last ? 'rollout.done' : 'rollout.wave',
        resource: 'rollout',
        resource_id: rollout.id,
        changes: last ? {} : { wave: rollout.wave + 1 },
      });
    }
  }
  if (ordered.length === 0 || !bundle) return;
  const contents = store.bundles.contents(bundle.id)!;
  const order: UpgradeMessage = {
    type: 'upgrade',
    rollout_id: rollout.id,
    version: rollout.version,
    gate_seconds: rollout.gate_seconds,
    soak_seconds: rollout.soak_seconds,
    bundle: Buffer.from(contents.body).toString('base64'),
    signature: contents.signature,
  };
  store.db.afterCommit(() => {
    for (const nodeId of ordered) sync.upgrades.emit('upgrade', nodeId, order);
  });
}

/** How long after an agent that went back links again its report of why is waited for (see gate). */
const BACK_REPORT_GRACE_MS = 5_000;

/**
 * How an upgrading node's gate stands: passed, failed (and why), 'soaking' when its new agent was first found linked,
 * applied and healthy (its soak begins now), or null while it is still within its gate or soak. Through the soak the
 * agent must keep the link it had then, its version, its config applied and its targets as healthy: a new link (it
 * exited and came back, or lost the link), another version (it went back) or a target down fails it at once.
 */
function gate(
  app: RolloutDriver,
  rollout: Rollout,
  node: RolloutNode,
  now: number,
): { state: 'passed' | 'failed'; detail: string } | 'soaking' | null {
  const { store, sync } = app;
  const report = sync.takeUpgradeReport(node.node_id);
  if (report?.rollout_id === rollout.id && report.state === 'refused')
    return { state: 'failed', detail: `its agent refused the bundle: ${report.detail}` };
  if (report?.rollout_id === rollout.id && report.state === 'rolled_back')
    return { state: 'failed', detail: `its agent went back to the bundle before: ${report.detail}` };
  const found = store.nodes.find(node.node_id);
  if (!found) return { state: 'failed', detail: 'deleted while upgrading' };
  const linked = sync.isConnected(node.node_id) && found.agent_version === rollout.version;
  const healthy = store.rollouts.unhealthyRules(node.node_id) <= (node.unhealthy_before ?? 0);
  const holds = linked && sync.appliedSinceLink(node.node_id) === found.config_version && healthy;
  if (node.soaking_since !== null) {
    const since = Date.parse(node.soaking_since);
    const into = `${Math.round((now - since) / 1000)} s into its ${rollout.soak_seconds} s soak`;
    if (sync.linkOf(node.node_id) !== node.soak_link) {
      // An agent that went back says why once it links again, its supervisor's word and the better reason: it is
      // given a moment to link again (its supervisor starts the bundle before), and its report a moment to come (the
      // turn may fall between the link and its first messages).
      const lostAt = sync.lostAtMs(node.node_id);
      if (lostAt !== undefined && now < lostAt + BACK_REPORT_GRACE_MS) return null;
      const linkedAt = sync.linkedAtMs(node.node_id);
      const wentBack = linkedAt !== undefined && found.agent_version !== rollout.version;
      if (wentBack && now < linkedAt + BACK_REPORT_GRACE_MS) return null;
      return { state: 'failed', detail: `its agent lost its link ${into} (it exited, or the link broke)` };
    }
    if (found.agent_version !== rollout.version)
      return { state: 'failed', detail: `its agent runs ${found.agent_version} again ${into}` };
    if (!healthy) return { state: 'failed', detail: `more of its rules have a target down than before, ${into}` };
    if (now < since + rollout.soak_seconds * 1000) return null;
    return {
      state: 'passed',
      detail: `runs ${rollout.version}, linked, applied and healthy through a ${rollout.soak_seconds} s soak`,
    };
  }
  if (holds) {
    if (rollout.soak_seconds > 0) return 'soaking';
    return { state: 'passed', detail: `runs ${rollout.version}, linked and applied config ${found.config_version}` };
  }
  const deadline = Date.parse(node.started_at!) + (rollout.gate_seconds + GATE_GRACE_SECONDS) * 1000;
  if (now < deadline) return null;
  return {
    state: 'failed',
    detail: linked
      ? `runs ${rollout.version} but did not apply its config with its targets as healthy as before within ` +
        `${rollout.gate_seconds} s`
      : `did not link with ${rollout.version} within ${rollout.gate_seconds} s, nor say it went back`,
  };
}
