// Method + path-pattern routing: `{name}` segments, the most specific pattern for the path
// wins whatever the method (so /api/rules/batch-sync is never taken for /api/rules/{id}),
// conflicting patterns fail at start-up, a known path with a wrong method is told which
// methods it allows, and GET also serves HEAD.

export interface Match<R> {
  route: R;
  params: Record<string, string>;
}

export type Lookup<R> = { found: Match<R> } | { allowed: string[] } | null;

interface Node<R> {
  literals: Map<string, Node<R>>;
  param?: { name: string; node: Node<R> };
  methods: Map<string, R>;
}

function newNode<R>(): Node<R> {
  return { literals: new Map(), methods: new Map() };
}

function segmentsOf(path: string): string[] {
  return path.split('/').slice(1);
}

export class Router<R> {
  private readonly root = newNode<R>();

  add(method: string, pattern: string, route: R): void {
    if (!pattern.startsWith('/')) throw new Error(`route pattern must start with '/': ${pattern}`);
    let node = this.root;
    const names = new Set<string>();
    for (const segment of segmentsOf(pattern)) {
      const param = /^\{([a-z_][a-z0-9_]*)\}$/.exec(segment);
      if (param) {
        const name = param[1]!;
        if (names.has(name)) throw new Error(`duplicate parameter {${name}} in ${pattern}`);
        names.add(name);
        if (node.param && node.param.name !== name) {
          throw new Error(`${pattern} names parameter {${name}} where another route names {${node.param.name}}`);
        }
        node.param ??= { name, node: newNode() };
        node = node.param.node;
      } else {
        if (segment.includes('{') || segment.includes('}')) throw new Error(`bad segment '${segment}' in ${pattern}`);
        let next = node.literals.get(segment);
        if (!next) node.literals.set(segment, (next = newNode()));
        node = next;
      }
    }
    if (node.methods.has(method)) throw new Error(`conflicting routes: ${method} ${pattern} is registered twice`);
    node.methods.set(method, route);
  }

  lookup(method: string, path: string): Lookup<R> {
    const candidates: { node: Node<R>; params: Record<string, string> }[] = [];
    collect(this.root, segmentsOf(path), 0, {}, candidates);
    if (candidates.length === 0) return null;
    const { node, params } = candidates[0]!;
    for (const m of method === 'HEAD' ? ['HEAD', 'GET'] : [method]) {
      const route = node.methods.get(m);
      if (route) return { found: { route, params } };
    }
    const allowed = new Set<string>();
    for (const m of node.methods.keys()) {
      allowed.add(m);
      if (m === 'GET') allowed.add('HEAD');
    }
    return { allowed: [...allowed].sort() };
  }
}

/** Depth-first, literal before parameter: candidates arrive most specific first. */
function collect<R>(
  node: Node<R>,
  segments: string[],
  index: number,
  params: Record<string, string>,
  out: { node: Node<R>; params: Record<string, string> }[],
): void {
  if (index === segments.length) {
    if (node.methods.size > 0) out.push({ node, params });
    return;
  }
  const segment = segments[index]!;
  const literal = node.literals.get(segment);
  if (literal) collect(literal, segments, index + 1, params, out);
  if (node.param && segment !== '') {
    let value: string;
    try {
      value = decodeURIComponent(segment);
    } catch {
      return;
    }
    collect(node.param.node, segments, index + 1, { ...params, [node.param.name]: value }, out);
  }
}
