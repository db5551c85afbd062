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
  /** The parameters of the patterns that end here, in order (each route to a node has the same ones). */
  names: string[];
}

function newNode<R>(): Node<R> {
  return { literals: new Map(), methods: new Map(), names: [] };
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
    node.names = [...names];
  }

  lookup(method: string, path: string): Lookup<R> {
    const values: string[] = [];
    const node = firstMatch(this.root, segmentsOf(path), 0, values);
    if (node === null) return null;
    for (const m of method === 'HEAD' ? ['HEAD', 'GET'] : [method]) {
      const route = node.methods.get(m);
      if (route) return { found: { route, params: paramsOf(node, values) } };
    }
    const allowed = new Set<string>();
    for (const m of node.methods.keys()) {
      allowed.add(m);
      if (m === 'GET') allowed.add('HEAD');
    }
    return { allowed: [...allowed].sort() };
  }
}

/**
 * Depth-first, literal before parameter: the first node with routes that the path reaches is the most specific. The
 * parameters' values on the way there are left in `values`, in order.
 */
function firstMatch<R>(node: Node<R>, segments: string[], index: number, values: string[]): Node<R> | null {
  if (index === segments.length) return node.methods.size > 0 ? node : null;
  const segment = segments[index]!;
  const literal = node.literals.get(segment);
  if (literal) {
    const found = firstMatch(literal, segments, index + 1, values);
    if (found) return found;
  }
  if (!node.param || segment === '') return null;
  let value: string;
  try {
    value = decodeURIComponent(segment);
  } catch {
    return null;
  }
  values.push(value);
  const found = firstMatch(node.param.node, segments, index + 1, values);
  if (!found) values.pop();
  return found;
}

/** The parameters named on the way to `node`, with their values. */
function paramsOf<R>(node: Node<R>, values: string[]): Record<string, string> {
  const params: Record<string, string> = {};
  for (let i = 0; i < values.length; i++) params[node.names[i]!] = values[i]!;
  return params;
}
