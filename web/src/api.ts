// The one way the console talks to the master: JSON over fetch to this origin's /api, with the
// session token (kept in this tab's sessionStorage, never in localStorage or a cookie).

import type { components } from './api.gen.ts';

/** A schema of the API document, as the master reads and answers it (web/src/api.gen.ts, made by `npm run docs`). */
export type Schema<Name extends keyof components['schemas']> = components['schemas'][Name];

export type Problem = Schema<'Problem'> & { [fact: string]: unknown };

export class ApiError extends Error {
  constructor(readonly problem: Problem) {
    super(problem.detail);
  }
  get status(): number {
    return this.problem.status;
  }
}

export interface Answer<T> {
  status: number;
  data: T;
  etag: string | null;
}

export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

const TOKEN_KEY = 'portplane.session';

export const session = {
  get token(): string | null {
    return sessionStorage.getItem(TOKEN_KEY);
  },
  start(token: string): void {
    sessionStorage.setItem(TOKEN_KEY, token);
  },
  end(): void {
    sessionStorage.removeItem(TOKEN_KEY);
  },
};

/** Fired when the master no longer accepts the session: the console goes back to sign-in. */
export const SIGNED_OUT = 'portplane:signed-out';

export async function api<T = unknown>(
  method: string,
  path: string,
  options: { body?: unknown; ifMatch?: string | null } = {},
): Promise<Answer<T>> {
  const headers: Record<string, string> = { Accept: 'application/json' };
  const token = session.token;
  if (token) headers.Authorization = `Bearer ${token}`;
  if (options.body !== undefined) headers['Content-Type'] = 'application/json';
  if (options.ifMatch) headers['If-Match'] = options.ifMatch;
  const response = await fetch(path, {
    method,
    headers,
    body: options.body === undefined ? null : JSON.stringify(options.body),
    credentials: 'omit',
    cache: 'no-store',
  });
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    // Not the master's JSON (a proxy's error page, say): the status line is all there is to show.
    if (response.ok) throw new Error(`the answer to ${method} ${path} is not JSON`);
  }
  if (!response.ok) {
    const problem: Problem =
      data && typeof data.detail === 'string'
        ? data
        : { status: response.status, code: 'unknown', title: response.statusText, detail: response.statusText };
    if (response.status === 401 && token) {
      session.end();
      window.dispatchEvent(new Event(SIGNED_OUT));
    }
    throw new ApiError(problem);
  }
  return { status: response.status, data: data as T, etag: response.headers.get('ETag') };
}

export const get = async <T>(path: string): Promise<T> => (await api<T>('GET', path)).data;

/** `path` with the query parameters that have a value. */
export function withQuery(path: string, query: Record<string, string | number | null | undefined>): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query))
    if (value !== null && value !== undefined && value !== '') params.set(name, String(value));
  const text = params.toString();
  return text ? `${path}?${text}` : path;
}
