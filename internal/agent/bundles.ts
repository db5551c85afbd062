// The agent bundles a node keeps beside the one its service starts (the launcher): the bundle it runs and the one
// before, each with its signature, in <state dir>/bundles. A bundle is verified against the agent's release keys when
// it is kept and again whenever it is to be run, so a file changed on disk is never run. Which one runs is a small
// pointer file, replaced whole: a switch is atomic, and a switch not yet confirmed (the new agent has not linked and
// applied) is undone by the next start.

import type { KeyObject } from 'node:crypto';
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { BundleRefused, verifyBundle } from '../release/signature.ts';
import { writeFileAtomic } from '../runtime/files.ts';

/** A bundle kept here: its file and the version its signature vouches for. */
export interface KeptBundle {
  sha256: string;
  version: string;
}

interface Pointer {
  current: KeptBundle;
  /** What ran before; null: the launcher. */
  previous: KeptBundle | null;
  /** Whether the current one linked and applied (until then, a start runs the previous one). */
  confirmed: boolean;
  /** The launcher's SHA-256 when the switch was made: a launcher replaced since (a reinstall) is run, not this. */
  launcher: string;
}

const POINTER = 'current.json';

/** Where a node keeps its bundles. */
const bundlesDir = (stateDir: string) => join(stateDir, 'bundles');

/** Keeps `bundle` in `stateDir` once its signature (a `.sig` file's text) verifies. Throws BundleRefused. */
export function keepBundle(
  stateDir: string,
  keys: readonly KeyObject[],
  bundle: Buffer,
  signatureText: string,
): KeptBundle {
  let signature: unknown;
  try {
    signature = JSON.parse(signatureText);
  } catch {
    throw new BundleRefused('the signature is not JSON');
  }
  const version = verifyBundle(bundle, signature, keys);
  const sha256 = createHash('sha256').update(bundle).digest('hex');
  const file = join(bundlesDir(stateDir), `${sha256}.mjs`);
  mkdirSync(bundlesDir(stateDir), { recursive: true, mode: 0o700 });
  writeFileAtomic(file, bundle);
  writeFileAtomic(`${file}.sig`, signatureText);
  return { sha256, version };
}

export class BundleShelf {
  private readonly dir: string;

  constructor(
    stateDir: string,
    private readonly keys: readonly KeyObject[],
    /** The file the service starts, which runs when no kept bundle is to. */
    private readonly launcher: string,
  ) {
    this.dir = bundlesDir(stateDir);
  }

  /** The file of a kept bundle, verified again now. Throws BundleRefused (also for one missing or unreadable). */
  verified(kept: KeptBundle): string {
    const file = this.fileOf(kept.sha256);
    let bundle: Buffer;
    let signature: unknown;
    try {
      bundle = readFileSync(file);
      signature = JSON.parse(readFileSync(`${file}.sig`, 'utf8'));
    } catch (error) {
      throw new BundleRefused(`bundle ${kept.version} cannot be read: ${(error as Error).message}`);
    }
    const version = verifyBundle(bundle, signature, this.keys);
    if (version !== kept.version) throw new BundleRefused(`bundle ${kept.sha256} is ${version}, not ${kept.version}`);
    return file;
  }

  /**
   * The bundle to run at a start, verified; null: the launcher. A switch never confirmed is undone first (the agent
   * stopped while it was on trial), and a launcher replaced since the switch (a reinstall) wins over every kept one.
   */
  toRun(): { file: string; version: string } | null {
    let pointer = this.pointer();
    if (!pointer) return null;
    if (pointer.launcher !== this.launcherHash()) {
      this.clear();
      return null;
    }
    if (!pointer.confirmed) pointer = this.undo();
    if (!pointer) return null;
    return { file: this.verified(pointer.current), version: pointer.current.version };
  }

  /** Makes `next` the bundle to run, on trial: the one running now is kept to go back to. */
  switchTo(next: KeptBundle): void {
    const pointer = this.pointer();
    const previous = pointer && pointer.launcher === this.launcherHash() ? pointer.current : null;
    this.write({ current: next, previous, confirmed: false, launcher: this.launcherHash() });
  }

  /** The bundle on trial linked and applied: it stays, and bundles other than it and the previous one go. */
  confirm(): void {
    const pointer = this.pointer();
    if (!pointer) return;
    this.write({ ...pointer, confirmed: true });
    const kept = new Set([pointer.current.sha256, pointer.previous?.sha256].filter(Boolean).map((h) => `${h}.mjs`));
    for (const name of readdirSync(this.dir))
      if (name !== POINTER && !kept.has(name.replace(/\.sig$/, ''))) rmSync(join(this.dir, name), { force: true });
  }

  /** Goes back to what ran before the switch on trial; returns the pointer now, null: the launcher runs. */
  undo(): Pointer | null {
    const pointer = this.pointer();
    return !pointer || pointer.confirmed ? pointer : this.back(pointer);
  }

  /**
   * The confirmed bundle crash-loops: goes back to the one it replaced (or the launcher, with none kept before it),
   * for good: it ran before. Returns the pointer now, null: the launcher runs.
   */
  fallBack(): Pointer | null {
    const pointer = this.pointer();
    return pointer && this.back(pointer);
  }

  /** Makes the bundle `pointer` replaced the one to run, confirmed (null, and the launcher runs, with none). */
  private back(pointer: Pointer): Pointer | null {
    if (!pointer.previous) {
      this.clear();
      return null;
    }
    const back = { current: pointer.previous, previous: null, confirmed: true, launcher: pointer.launcher };
    this.write(back);
    return back;
  }

  private fileOf(sha256: string): string {
    return join(this.dir, `${sha256}.mjs`);
  }

  private launcherHash(): string {
    return createHash('sha256').update(readFileSync(this.launcher)).digest('hex');
  }

  private pointer(): Pointer | null {
    try {
      const value = JSON.parse(readFileSync(join(this.dir, POINTER), 'utf8')) as Pointer;
      const kept = (k: unknown) =>
        typeof k === 'object' &&
        k !== null &&
        /^[0-9a-f]{64}$/.test((k as KeptBundle).sha256) &&
        typeof (k as KeptBundle).version === 'string';
      if (kept(value.current) && (value.previous === null || kept(value.previous))) return value;
    } catch {
      // none, or damaged: the launcher runs
    }
    return null;
  }

  private write(pointer: Pointer): void {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    writeFileAtomic(join(this.dir, POINTER), JSON.stringify(pointer));
  }

  private clear(): void {
    rmSync(join(this.dir, POINTER), { force: true });
  }
}
