// What another tool's config says, as portplane's rules and tunnels: each reader (realm.ts, gost.ts, ...) makes this
// shape from its format, and the import makes an export document of it, so a foreign config goes through the one
// import (dry run, per-item results, one transaction). What a reader cannot carry over is listed with its line and
// why, never dropped in silence.

import { controlDefaults, type HealthCheck, type Protocol, type RuleFields, type Strategy } from '../domain/rules.ts';

/** A JSON value as a source parses it (gost's config, nft's ruleset): nothing is trusted to have its shape. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

export const isObject = (value: Json | undefined): value is JsonObject =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** A construct of the source that does not become part of a rule, and why. */
export interface Unmapped {
  /** Its line in the source (1 for a source of one line, or JSON without lines). */
  line: number;
  /** What it is, as the source says it (`balance = "roundrobin"`, `-j MASQUERADE`). */
  construct: string;
  why: string;
}

/** A rule as a source describes it: what portplane's rule takes, and the line it came from. */
export interface ForeignRule {
  line: number;
  name: string;
  protocol: Protocol;
  listen_port: number;
  listen_port_end?: number | null;
  targets: string[];
  strategy?: Strategy;
  weights?: number[] | null;
  proxy_protocol?: 'v1' | 'v2';
  max_connections?: number | null;
  bandwidth_limit?: number | null;
  source_address?: string | null;
  allow_sources?: string[];
  deny_sources?: string[];
  preserve_source?: boolean;
  max_new_connections_per_second?: number | null;
  health_check?: HealthCheck | null;
}

/** A tunnel between the node read for and its peer, as a pair of ends in the source describes it. */
export interface ForeignTunnel {
  line: number;
  name: string;
  /** Which end the peer is: the exit (NodePass: the client's node) or the entry (gost rtcp: the relay's). */
  peerIs: 'exit' | 'entry';
  /** The port the exit listens on for the entry. */
  listen_port: number;
  /** The rule carried through it: listened for on the entry, its targets dialled from the exit. */
  rule: ForeignRule;
}

export interface ForeignConfig {
  rules: ForeignRule[];
  tunnels: ForeignTunnel[];
  unmapped: Unmapped[];
}

/** A source that cannot be read at all (not its format): the import's 422 names its line. */
export class SourceError extends Error {
  constructor(
    readonly line: number,
    message: string,
  ) {
    super(message);
  }
}

/** Every address the node has: a listener on one of these listens as a rule does (rules listen on all). */
export const ANY_ADDRESS = new Set(['', '0.0.0.0', '::', '[::]', '*']);

/**
 * `host:port` split (an IPv6 host in brackets, or as the last colon leaves it with an unbracketed listener's
 * `::1:80`... which is refused: ambiguous). Null when it is not one.
 */
export function splitHostPort(text: string): { host: string; port: number } | null {
  const bracketed = /^\[([^\]]*)\]:(\d{1,5})$/.exec(text);
  const plain = /^([^:[\]]*):(\d{1,5})$/.exec(text);
  const found = bracketed ?? plain;
  if (!found) return null;
  const port = Number(found[2]);
  if (port < 1 || port > 65535) return null;
  return { host: bracketed ? `[${found[1]}]` : found[1]!, port };
}

/** A target as rules write it: `host:port`, an IPv6 host in brackets. */
export function targetOf(host: string, port: number): string {
  const bare = host.replace(/^\[|\]$/g, '');
  return bare.includes(':') ? `[${bare}]:${port}` : `${bare}:${port}`;
}

/** A name for a rule read from a source: the format and the port, as unique as the source's listeners are. */
export function ruleName(format: string, protocol: Protocol, port: number, end?: number | null): string {
  const span = end ? `${port}-${end}` : String(port);
  return `${format}-${protocol === 'tcp+udp' ? '' : `${protocol}-`}${span}`;
}

/** Why a rule cannot be written for a tool that listens on one port for fixed targets, or null when it can. */
export function leftOut(rule: RuleFields): string | null {
  if (!rule.enabled) return 'it is disabled';
  if (rule.tunnel_id !== null) return 'it goes through a tunnel';
  if (rule.listen_port_end !== null) return 'it listens on a range of ports';
  if (rule.targets.some((target) => !splitHostPort(target))) return 'a target is a range or a DNS SRV name';
  return null;
}

/** The controls of `rule` set otherwise than by default that a format does not carry (those in `carried` it does). */
export function notCarried(rule: RuleFields, carried: readonly string[]): string[] {
  return Object.entries(controlDefaults)
    .filter(([key]) => !carried.includes(key) && key !== 'tags')
    .filter(([key, value]) => JSON.stringify(rule[key as keyof RuleFields]) !== JSON.stringify(value))
    .map(([key]) => key);
}
