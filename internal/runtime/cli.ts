// The shape both programs share: parse flags and environment, answer --help/--version or a
// usage error, start, and on SIGTERM/SIGINT stop cleanly and exit 0.

import type { Logger } from '../log/log.ts';

export type Parsed<C> = { config: C } | { exit: 'help' | 'version' } | { error: string };

export interface Program<C> {
  name: string;
  version: string;
  usage: string;
  log: Logger;
  parsed: Parsed<C>;
  /** Starts the program; resolves to how to stop it. */
  start(config: C): Promise<() => Promise<void>>;
}

export async function run<C>(program: Program<C>): Promise<void> {
  const { parsed, log } = program;
  if ('exit' in parsed) {
    process.stdout.write(parsed.exit === 'help' ? program.usage : `${program.name} ${program.version}\n`);
    process.exit(0);
  }
  if ('error' in parsed) {
    process.stderr.write(`${program.name}: ${parsed.error}\n`);
    process.exit(2);
  }
  // A promise that failed with nobody to hear it ends the flow that made it, not the program. Every flow contains its
  // own faults; this is the net under one that slips (a master once re-armed a timeout on a socket a 413 had let go,
  // after each such answer), logged so that it is mended.
  process.on('unhandledRejection', (reason) =>
    log.error('unhandled rejection', { error: (reason as Error)?.stack ?? String(reason) }),
  );
  // Listened for before starting: until a listener is added, SIGTERM takes its default action and ends the process
  // at once, so one sent right after the listening line (or during a slow start) would kill rather than stop it.
  let stop: (() => Promise<void>) | undefined;
  let stopRequested: NodeJS.Signals | undefined;
  const stopNow = (signal: NodeJS.Signals, stopProgram: () => Promise<void>) => {
    log.info('stopping', { signal });
    stopProgram().then(
      () => process.exit(0),
      (error: unknown) => {
        log.error('stop failed', { error: String(error) });
        process.exit(1);
      },
    );
  };
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.on(signal, () => {
      if (stopRequested) {
        // A second signal while still starting (a start that seems stuck, Ctrl-C twice) ends it at once.
        if (stop) return;
        log.warn('stopped while starting', { signal });
        process.exit(1);
      }
      stopRequested = signal;
      // While starting, the start completes first and then stops (below).
      if (stop) stopNow(signal, stop);
    });
  }
  try {
    stop = await program.start(parsed.config);
  } catch (error) {
    const message = (error as Error).message;
    log.error('could not start', { error: message });
    // Also on stderr, for whoever ran it by hand or reads the unit's status.
    process.stderr.write(`${program.name}: could not start: ${message}\n`);
    process.exit(1);
  }
  if (stopRequested) stopNow(stopRequested, stop);
}
