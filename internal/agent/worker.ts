// The agent as its supervisor's worker (see supervisor.ts): the supervisor's orders over the IPC channel, and what
// the agent tells it.

import type { Logger } from '../log/log.ts';
import type { Agent, SupervisorChannel } from './agent.ts';
import { checkMessage } from '../agentlink/wire.ts';
import { fellBackMessage } from '../domain/link.ts';
import type { SocketKeeper } from '../forward/forwarder.ts';
import { FELL_BACK_ENV, KEEPS_ENV, SOAKS_ENV, type ToSupervisor, type ToWorker } from './supervisor.ts';

/** What the supervisor says it went back from (see FELL_BACK_ENV); null: nothing, or nothing that reads. */
function fellBackOf(text: string | undefined): SupervisorChannel['fellBack'] {
  if (!text) return null;
  try {
    const { type: _, ...said } = checkMessage(fellBackMessage, { type: 'fell_back', ...JSON.parse(text) });
    return said;
  } catch {
    return null;
  }
}

type Handle = { close(): unknown };

function tell(message: ToSupervisor, handle?: object): Promise<void> {
  return new Promise((resolve) => {
    if (!process.connected) return resolve();
    process.send!(message, handle as never, undefined, () => resolve());
  });
}

/**
 * Calls `gone` once the supervisor is gone. Node says 'disconnect' only once every handle sent on the channel was
 * acknowledged, which a supervisor that died never does: the channel's state is looked at every second too.
 */
function whenSupervisorGone(gone: () => void): void {
  let told = false;
  const tellOnce = () => {
    if (told) return;
    told = true;
    clearInterval(watch);
    gone();
  };
  const watch = setInterval(() => !process.connected && tellOnce(), 1000).unref();
  process.once('disconnect', tellOnce);
}

/** The longest a worker waits for its supervisor to drop copies of sockets; past it, their ports may stay bound. */
const RELEASE_WAIT_MS = 5_000;

/** The supervisor keeps copies of this worker's listening sockets (see Supervisor). */
function supervisorKeeper(): SocketKeeper {
  let asked = 0;
  const waiting = new Map<number, () => void>();
  process.on('message', (message: ToWorker) => {
    if (message.type === 'released') waiting.get(message.seq)?.();
  });
  whenSupervisorGone(() => {
    for (const done of [...waiting.values()]) done();
  });
  return {
    keep: (key, handle) => void tell({ type: 'keep', key }, handle),
    release: (keys) =>
      new Promise((resolve) => {
        if (!process.connected) return resolve();
        const seq = ++asked;
        const done = () => {
          clearTimeout(timer);
          waiting.delete(seq);
          resolve();
        };
        const timer = setTimeout(done, RELEASE_WAIT_MS);
        waiting.set(seq, done);
        void tell({ type: 'release', keys, seq });
      }),
  };
}

/** What the agent tells its supervisor. */
export const supervisorChannel: SupervisorChannel = {
  soaks: process.env[SOAKS_ENV] === '1',
  keeper: process.env[KEEPS_ENV] === '1' ? supervisorKeeper() : null,
  fellBack: fellBackOf(process.env[FELL_BACK_ENV]),
  upgrade: (order) => void tell({ type: 'upgrade', ...order }),
  ready: () => void tell({ type: 'ready' }),
  unlinked: () => void tell({ type: 'unlinked' }),
};

/** The listening sockets handed to a worker started to take over, by `transport:port`, once all have come. */
export function inheritedSockets(): Promise<Map<string, Handle>> {
  const sockets = new Map<string, Handle>();
  return new Promise((resolve) => {
    const take = (message: ToWorker, handle: unknown) => {
      if (message.type === 'listener' && handle) sockets.set(message.key, handle as Handle);
      if (message.type !== 'listeners_done') return;
      process.off('message', take);
      resolve(sockets);
    };
    process.on('message', take);
  });
}

/**
 * Carries out the supervisor's orders; `exit` ends the process once a drained worker is done. A worker whose
 * supervisor is gone (killed) stops too: nothing would start it again, or stop it.
 */
export function obeySupervisor(agent: Agent, log: Logger, exit: (code: number) => void): void {
  process.on('message', (message: ToWorker) => {
    switch (message.type) {
      case 'handover':
        void agent.handOver().then(async (handles) => {
          for (const { key, handle } of handles) await tell({ type: 'listener', key }, handle);
          await tell({ type: 'handed_over' });
        });
        return;
      case 'drain':
        void agent
          .drainOut(message.seconds, (rules) =>
            rules.length > 0 ? tell({ type: 'traffic', rules }) : Promise.resolve(),
          )
          .then(() => exit(0));
        return;
      case 'resume':
        log.warn('the upgrade was rolled back: this agent carries on', { reason: message.reason });
        void agent.resume(message.rollout_id, message.reason);
        return;
      case 'traffic':
        agent.absorb(message.rules);
        return;
    }
  });
  whenSupervisorGone(() => {
    log.warn('the agent supervisor is gone: stopping');
    void agent.stop().finally(() => exit(0));
  });
}
