// The agent's supervisor: the process its service starts when it trusts release keys. It runs the agent itself as a
// child (the worker) from the bundle to run (see bundles.ts), starts it again if it dies, and carries out upgrades:
// the worker verifies and keeps a new bundle, the supervisor takes the worker's listening sockets, starts the new
// bundle with them (both accept meanwhile: no connection is refused), and gives it `gate_seconds` to link and apply,
// then `soak_seconds` to stay running and linked (a bundle that applies and dies seconds later must not pass). Then
// the old worker stops accepting and drains; otherwise the new one is stopped, the switch undone, and the old one,
// which never stopped forwarding, links again and says so. The watchdog is here, not in the new bundle, which
// may be unable to run at all, nor at the master, which the new bundle may be unable to reach.
//
// The supervisor also keeps a copy of each socket its worker listens on (the worker sends each as it listens, and
// says when it closes one). A worker that dies takes no listening socket with it: connections wait in the kernel's
// backlog, and the next worker is handed the copies, as in an upgrade. Every worker keeps this table: it runs a bundle
// no older than the supervisor (the installed agent, or one kept since, and an agent takes no older bundle).

import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import type { KeyObject } from 'node:crypto';
import type { Logger } from '../log/log.ts';
import { BundleShelf, type KeptBundle } from './bundles.ts';
import type { RuleTraffic } from '../domain/rules.ts';
import type { FellBackMessage } from '../domain/link.ts';

/** How a worker knows its part: the variable's value. */
export const ROLE_ENV = 'PORTPLANE_AGENT_ROLE';
/** Set (to 1) for its workers by a supervisor that keeps an upgrade on trial through a soak: they say so on linking. */
export const SOAKS_ENV = 'PORTPLANE_SUPERVISOR_SOAKS';
/**
 * Set for the worker started after the supervisor went back from a bundle that crash-looped: JSON of what the worker
 * tells the master when it links (FellBackMessage's fields).
 */
export const FELL_BACK_ENV = 'PORTPLANE_FELL_BACK';
/** Set (to 1) for its workers by a supervisor that keeps copies of their listening sockets (see SocketKeeper). */
export const KEEPS_ENV = 'PORTPLANE_SUPERVISOR_KEEPS';

/** A kept bundle whose worker exits this many times within the window crash-loops: the one before runs instead. */
const CRASH_LOOP_EXITS = 3;
const CRASH_LOOP_WINDOW_MS = 60_000;
export type WorkerRole = 'worker' | 'takeover';

/** Worker to supervisor. */
export type ToSupervisor =
  | { type: 'upgrade'; bundle: KeptBundle; gate_seconds: number; soak_seconds: number; rollout_id: number }
  | { type: 'ready' }
  | { type: 'unlinked' }
  | { type: 'listener'; key: string }
  | { type: 'handed_over' }
  | { type: 'keep'; key: string }
  | { type: 'release'; keys: string[]; seq: number }
  | { type: 'traffic'; rules: RuleTraffic[] };

/** Supervisor to worker. */
export type ToWorker =
  | { type: 'handover' }
  | { type: 'listener'; key: string }
  | { type: 'listeners_done' }
  | { type: 'released'; seq: number }
  | { type: 'drain'; seconds: number }
  | { type: 'resume'; rollout_id: number; reason: string }
  | { type: 'traffic'; rules: RuleTraffic[] };

export interface SupervisorOptions {
  /** The file the service starts (this program), run when no kept bundle is to be. */
  launcher: string;
  /** How Node runs the launcher (a development run's loader); kept bundles need none. */
  execArgv: string[];
  /** The agent's arguments, which every worker is given. */
  args: string[];
  stateDir: string;
  releaseKeys: readonly KeyObject[];
  /** How long an old worker carries its open connections after the new one took over. */
  drainSeconds: number;
  log: Logger;
}

/** A listening socket's handle, as passed between processes. */
type Handle = { close(): unknown };
/** Listening sockets by `transport:port`. */
type Sockets = Map<string, Handle>;

/** An upgrade under way. */
interface Trial {
  order: Extract<ToSupervisor, { type: 'upgrade' }>;
  old: ChildProcess;
  handles: Sockets;
  handedOver: () => void;
  next: ChildProcess | null;
  ready: () => void;
  /** The new worker's link to the master closed. */
  unlinked: () => void;
}

/** The longest a worker told to stop is waited for before it is killed. */
const STOP_WAIT_MS = 30_000;
/** The longest a worker is waited for to hand its sockets over; past it, the upgrade is given up. */
const HANDOVER_WAIT_MS = 30_000;
const MAX_RESTART_DELAY_MS = 30_000;

export class Supervisor {
  private readonly shelf: BundleShelf;
  private worker: ChildProcess | null = null;
  /** Workers handed over and draining, waited for on stop. */
  private readonly draining = new Set<ChildProcess>();
  private trial: Trial | null = null;
  private stopping = false;
  private restarts = 0;
  private restartTimer: NodeJS.Timeout | undefined;
  /** When the worker exited, within the last CRASH_LOOP_WINDOW_MS. */
  private exits: number[] = [];
  /** Copies of the sockets each worker listens on, until it closes them or exits. */
  private readonly kept = new Map<ChildProcess, Sockets>();
  /** The copies of a worker that died, for the next one. */
  private orphans: Sockets | null = null;

  constructor(private readonly options: SupervisorOptions) {
    this.shelf = new BundleShelf(options.stateDir, options.releaseKeys, options.launcher);
  }

  start(): void {
    this.worker = this.spawnWorker(this.bundleToRun(), null);
  }

  async stop(): Promise<void> {
    this.stopping = true;
    clearTimeout(this.restartTimer);
    // The ports close with the workers: nothing is to wait in their backlogs for a worker that will not come.
    closeAll(this.takeOrphans());
    for (const copies of this.kept.values()) closeAll(copies);
    this.kept.clear();
    const children = [this.worker, this.trial?.next ?? null, ...this.draining].filter(
      (child): child is ChildProcess => child !== null,
    );
    await Promise.all(children.map((child) => stopChild(child)));
  }

  /** The kept bundle to run now, verified; null: the launcher (none kept, or the kept one does not verify). */
  private bundleToRun(): { file: string; version: string } | null {
    try {
      return this.shelf.toRun();
    } catch (error) {
      this.options.log.error('the kept agent bundle does not verify: running the installed one', {
        error: (error as Error).message,
      });
      return null;
    }
  }

  /**
   * Starts a worker; with `sockets`, one that takes them over (they become its copies here, until it says which it
   * listens on).
   */
  private spawnWorker(
    bundle: { file: string } | null,
    sockets: Sockets | null,
    fellBack: Omit<FellBackMessage, 'type'> | null = null,
  ): ChildProcess {
    const { options } = this;
    const argv = bundle ? [bundle.file] : [...options.execArgv, options.launcher];
    const role: WorkerRole = sockets ? 'takeover' : 'worker';
    const child = spawn(process.execPath, [...argv, ...options.args], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: {
        ...process.env,
        [ROLE_ENV]: role,
        [SOAKS_ENV]: '1',
        [KEEPS_ENV]: '1',
        ...(fellBack ? { [FELL_BACK_ENV]: JSON.stringify(fellBack) } : {}),
      },
    });
    child.on('message', (message: ToSupervisor, handle: unknown) => this.fromWorker(child, message, handle));
    child.on('exit', (code, signal) => this.exited(child, code, signal));
    // A worker that went cannot be written to; what was on its way to it is lost with it.
    child.on('error', (error) => options.log.warn('agent worker error', { error: error.message }));
    if (sockets) {
      for (const [key, handle] of sockets) child.send({ type: 'listener', key } satisfies ToWorker, handle as never);
      this.kept.set(child, sockets);
      tell(child, { type: 'listeners_done' });
    }
    return child;
  }

  /** The copies of a worker that died, taken for the next one (null: none). */
  private takeOrphans(): Sockets | null {
    const orphans = this.orphans;
    this.orphans = null;
    return orphans;
  }

  private fromWorker(child: ChildProcess, message: ToSupervisor, handle: unknown): void {
    const { trial } = this;
    switch (message.type) {
      case 'upgrade':
        if (child === this.worker && !trial) void this.upgrade(child, message);
        return;
      case 'listener':
        if (trial?.old === child && handle) trial.handles.set(message.key, handle as Handle);
        return;
      case 'keep':
        if (handle) this.keep(child, message.key, handle as Handle);
        return;
      case 'release': {
        const copies = this.kept.get(child);
        for (const key of message.keys) {
          copies?.get(key)?.close();
          copies?.delete(key);
        }
        tell(child, { type: 'released', seq: message.seq });
        return;
      }
      case 'handed_over':
        if (trial?.old === child) trial.handedOver();
        return;
      case 'ready':
        if (trial?.next === child) trial.ready();
        else if (child === this.worker) this.restarts = 0;
        return;
      case 'unlinked':
        if (trial?.next === child) trial.unlinked();
        return;
      case 'traffic':
        // What a draining worker still relayed, for the worker that reports now.
        if (this.draining.has(child) && this.worker) tell(this.worker, { type: 'traffic', rules: message.rules });
        return;
    }
  }

  private keep(child: ChildProcess, key: string, handle: Handle): void {
    // A copy that comes after its worker went, or after the stop, has nobody to go to.
    if (this.stopping || child.exitCode !== null || child.signalCode !== null) return void handle.close();
    const copies = this.kept.get(child) ?? new Map<string, Handle>();
    copies.get(key)?.close();
    copies.set(key, handle);
    this.kept.set(child, copies);
  }

  private exited(child: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
    this.draining.delete(child);
    const copies = this.kept.get(child) ?? null;
    this.kept.delete(child);
    // The running worker's sockets stay open for the one that follows it; any other's were its alone.
    if (child === this.worker && !this.stopping) {
      closeAll(this.takeOrphans());
      this.orphans = copies;
    } else closeAll(copies);
    // An old worker gone before it handed its sockets over: the new one starts without them.
    if (this.trial?.old === child && !this.trial.next) this.trial.handedOver();
    if (this.stopping || child !== this.worker || this.trial?.old === child) return;
    const now = Date.now();
    this.exits = [...this.exits.filter((at) => now - at < CRASH_LOOP_WINDOW_MS), now];
    if (this.exits.length >= CRASH_LOOP_EXITS && this.fallBack(code, signal)) return;
    // The worker died: started again, from the bundle to run, a little later each time it dies again soon.
    const delay = Math.min(MAX_RESTART_DELAY_MS, 1000 * 2 ** this.restarts);
    this.restarts += 1;
    this.options.log.error('the agent worker exited: starting it again', { code, signal, in_ms: delay });
    this.worker = null;
    this.restartTimer = setTimeout(() => {
      if (!this.stopping) this.worker = this.spawnWorker(this.bundleToRun(), this.takeOrphans());
    }, delay);
  }

  /**
   * The watchdog that stays after a soak: a kept bundle whose worker keeps dying goes back to the one it replaced,
   * started at once with the listening sockets of the worker that died, and its worker tells the master. False where
   * there is nothing to go back to (the launcher runs).
   */
  private fallBack(code: number | null, signal: NodeJS.Signals | null): boolean {
    const running = this.bundleToRun();
    if (!running) return false;
    const withinSeconds = Math.round((this.exits.at(-1)! - this.exits[0]!) / 1000);
    const fellBack = { from_version: running.version, exits: this.exits.length, within_seconds: withinSeconds };
    this.shelf.fallBack();
    this.exits = [];
    this.restarts = 0;
    this.options.log.error('the agent bundle crash-loops: back to the one it replaced', { ...fellBack, code, signal });
    this.worker = this.spawnWorker(this.bundleToRun(), this.takeOrphans(), fellBack);
    return true;
  }

  private async upgrade(old: ChildProcess, order: Trial['order']): Promise<void> {
    const { log } = this.options;
    let file: string;
    try {
      file = this.shelf.verified(order.bundle);
    } catch (error) {
      return tell(old, { type: 'resume', rollout_id: order.rollout_id, reason: (error as Error).message });
    }
    const trial: Trial = {
      order,
      old,
      handles: new Map(),
      handedOver: () => undefined,
      next: null,
      ready: () => undefined,
      unlinked: () => undefined,
    };
    this.trial = trial;
    const handedOver = new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), HANDOVER_WAIT_MS);
      trial.handedOver = () => {
        clearTimeout(timer);
        resolve(true);
      };
    });
    tell(old, { type: 'handover' });
    if (!(await handedOver)) {
      this.trial = null;
      closeAll(trial.handles);
      const reason = `the running agent did not hand its sockets over within ${HANDOVER_WAIT_MS / 1000} s`;
      log.error('an upgrade was given up', { version: order.bundle.version, reason });
      return tell(old, { type: 'resume', rollout_id: order.rollout_id, reason });
    }
    this.shelf.switchTo(order.bundle);
    // An old worker that died before it handed every socket over left the copies kept of them.
    const next = this.spawnWorker({ file }, joined(trial.handles, this.takeOrphans()));
    trial.next = next;
    const ready = new Promise<'ready'>((resolve) => (trial.ready = () => resolve('ready')));
    log.info('a new agent bundle starts', { version: order.bundle.version, sockets: trial.handles.size });
    const exited = once(next, 'exit').then(([code]) => code as number | null);
    let timer: NodeJS.Timeout | undefined;
    let outcome = await Promise.race([
      ready,
      exited.then((code) => `it exited (code ${code})`),
      new Promise<string>((resolve) => {
        timer = setTimeout(
          () => resolve(`it did not link and apply within ${order.gate_seconds} s`),
          order.gate_seconds * 1000,
        );
      }),
    ]);
    clearTimeout(timer);
    if (outcome === 'ready' && order.soak_seconds > 0) outcome = await this.soak(trial, exited);
    this.trial = null;
    if (outcome === 'ready') {
      this.shelf.confirm();
      // The old worker died meanwhile: the new one already has its sockets.
      closeAll(this.takeOrphans());
      this.worker = next;
      this.draining.add(old);
      tell(old, { type: 'drain', seconds: this.options.drainSeconds });
      log.info('upgraded: the new agent took over; the old one drains', {
        version: order.bundle.version,
        drain_seconds: this.options.drainSeconds,
      });
      return;
    }
    const reason = `agent ${order.bundle.version} was rolled back: ${outcome}`;
    log.error('the new agent bundle failed: back to the one before', { version: order.bundle.version, reason });
    // Going back takes the same path: the new agent stops accepting and drains what it took meanwhile (if it can
    // still hear; it is killed past the drain time), while the old one, which never stopped, carries on.
    this.draining.add(next);
    tell(next, { type: 'drain', seconds: this.options.drainSeconds });
    void stopChild(next, (this.options.drainSeconds + 5) * 1000, null);
    this.shelf.undo();
    if (old.exitCode === null && old.signalCode === null)
      tell(old, { type: 'resume', rollout_id: order.rollout_id, reason });
    else if (!this.stopping) {
      // The old worker died meanwhile: the one started in its place takes the sockets the new one listened on.
      const sockets = joined(this.kept.get(next) ?? new Map<string, Handle>(), this.takeOrphans());
      this.kept.delete(next);
      this.worker = this.spawnWorker(this.bundleToRun(), sockets);
    }
  }

  /**
   * The new worker linked and applied; the old one, still accepting beside it, is kept until the new one has stayed
   * running and linked through the soak: 'ready' then, otherwise why it goes back (it exited, or lost its link).
   */
  private async soak(trial: Trial, exited: Promise<number | null>): Promise<string> {
    const { order } = trial;
    const started = Date.now();
    const into = () => `${Math.round((Date.now() - started) / 1000)} s into its ${order.soak_seconds} s soak`;
    this.options.log.info('the new agent linked and applied: it soaks', {
      version: order.bundle.version,
      soak_seconds: order.soak_seconds,
    });
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      exited.then((code) => `it exited (code ${code}) ${into()}`),
      new Promise<string>((resolve) => (trial.unlinked = () => resolve(`it lost its link to the master ${into()}`))),
      new Promise<string>((resolve) => (timer = setTimeout(() => resolve('ready'), order.soak_seconds * 1000))),
    ]);
    clearTimeout(timer);
    return outcome;
  }
}

/** `sockets` with those of `more` it lacks; the copies it has already are closed. */
function joined(sockets: Sockets, more: Sockets | null): Sockets {
  for (const [key, handle] of more ?? []) {
    if (sockets.has(key)) handle.close();
    else sockets.set(key, handle);
  }
  return sockets;
}

function closeAll(sockets: Sockets | null): void {
  for (const handle of sockets?.values() ?? []) handle.close();
}

/** Sends to a worker, if it is there to hear it. */
function tell(child: ChildProcess, message: ToWorker): void {
  if (child.connected) child.send(message);
}

/**
 * Asks a worker to stop (SIGTERM; or, with `ask` null, leaves it to stop by itself), and kills it if it has not
 * within `ms`.
 */
async function stopChild(
  child: ChildProcess,
  ms = STOP_WAIT_MS,
  ask: NodeJS.Signals | null = 'SIGTERM',
): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  if (ask) child.kill(ask);
  const timer = setTimeout(() => child.kill('SIGKILL'), ms);
  await exited;
  clearTimeout(timer);
}
