// TOML (v1.0) as far as forwarding tools' configs use it: comments, bare, quoted and dotted keys, basic and literal
// strings (one line, and multi-line), integers (with _ and 0x/0o/0b), floats, booleans, arrays (over several lines),
// inline tables, [tables] and [[arrays of tables]]. Dates and times are refused with their line: no config read here
// has one. Each table remembers the line it was opened on and each key the line it was set on, for messages that
// name them. A document that is not TOML throws TomlError naming its line.

export class TomlError extends Error {
  constructor(
    readonly line: number,
    message: string,
  ) {
    super(`line ${line}: ${message}`);
  }
}

export type TomlValue = string | number | boolean | TomlValue[] | TomlTable;

/** A table: its keys, and the line each was set on (under LINES), the table's own line under OPENED. */
export interface TomlTable {
  [key: string]: TomlValue;
}

const LINES = Symbol('lines');
const OPENED = Symbol('opened');

interface Located {
  [LINES]?: Record<string, number>;
  [OPENED]?: number;
}

/** The line a key of `table` was set on (or the table's own line when unknown). */
export function lineOf(table: TomlTable, key?: string): number {
  const located = table as Located;
  return (key !== undefined ? located[LINES]?.[key] : undefined) ?? located[OPENED] ?? 1;
}

function newTable(line: number): TomlTable {
  const table: TomlTable = {};
  Object.defineProperty(table, LINES, { value: {}, enumerable: false });
  Object.defineProperty(table, OPENED, { value: line, enumerable: false });
  return table;
}

const BARE = /^[A-Za-z0-9_-]+/;
const ESCAPES: Record<string, string> = { b: '\b', t: '\t', n: '\n', f: '\f', r: '\r', '"': '"', '\\': '\\' };

class Reader {
  private at = 0;
  line = 1;
  constructor(private readonly text: string) {}

  fail(message: string): never {
    throw new TomlError(this.line, message);
  }

  get done(): boolean {
    return this.at >= this.text.length;
  }

  peek(offset = 0): string {
    return this.text[this.at + offset] ?? '';
  }

  startsWith(token: string): boolean {
    return this.text.startsWith(token, this.at);
  }

  take(count = 1): string {
    const taken = this.text.slice(this.at, this.at + count);
    for (const char of taken) if (char === '\n') this.line++;
    this.at += count;
    return taken;
  }

  match(pattern: RegExp): string | null {
    const found = pattern.exec(this.text.slice(this.at, this.at + 256));
    if (!found || found.index !== 0) return null;
    return this.take(found[0].length);
  }

  /** Spaces and tabs. */
  blank(): void {
    while (this.peek() === ' ' || this.peek() === '\t') this.take();
  }

  /** Blanks, comments and line ends: between the items of an array. */
  gap(): void {
    for (;;) {
      this.blank();
      if (this.peek() === '#') this.comment();
      else if (this.peek() === '\n') this.take();
      else if (this.startsWith('\r\n')) this.take(2);
      else return;
    }
  }

  comment(): void {
    while (!this.done && this.peek() !== '\n') {
      const char = this.take();
      if (char < ' ' && char !== '\t' && char !== '\r') this.fail('a control character in a comment');
    }
  }

  /** The end of a line: blanks, perhaps a comment, then a line break or the end. */
  endOfLine(): void {
    this.blank();
    if (this.peek() === '#') this.comment();
    if (this.startsWith('\r\n')) this.take(2);
    else if (this.peek() === '\n') this.take();
    else if (!this.done) this.fail(`unexpected ${JSON.stringify(this.peek())} after a value`);
  }

  key(): string[] {
    const parts: string[] = [];
    for (;;) {
      this.blank();
      if (this.peek() === '"') parts.push(this.basic());
      else if (this.peek() === "'") parts.push(this.literal());
      else parts.push(this.match(BARE) ?? this.fail('a key was expected'));
      this.blank();
      if (this.peek() !== '.') return parts;
      this.take();
    }
  }

  basic(): string {
    if (this.startsWith('"""')) return this.multiline('"""', true);
    this.take();
    let out = '';
    for (;;) {
      const char = this.take();
      if (char === '"') return out;
      if (char === '' || char === '\n') this.fail('a string is not closed on its line');
      out += char === '\\' ? this.escape() : this.plain(char);
    }
  }

  literal(): string {
    if (this.startsWith("'''")) return this.multiline("'''", false);
    this.take();
    let out = '';
    for (;;) {
      const char = this.take();
      if (char === "'") return out;
      if (char === '' || char === '\n') this.fail('a string is not closed on its line');
      out += this.plain(char);
    }
  }

  private plain(char: string): string {
    if ((char < ' ' && char !== '\t') || char === '\x7f') this.fail('a control character in a string');
    return char;
  }

  private escape(): string {
    const char = this.take();
    if (char in ESCAPES) return ESCAPES[char]!;
    if (char === 'u' || char === 'U') {
      const hex = this.take(char === 'u' ? 4 : 8);
      const code = /^[0-9A-Fa-f]+$/.test(hex) ? parseInt(hex, 16) : NaN;
      if (!(code <= 0x10ffff) || (code >= 0xd800 && code <= 0xdfff)) this.fail(`\\${char}${hex} is no character`);
      return String.fromCodePoint(code);
    }
    return this.fail(`\\${char} is no escape`);
  }

  private multiline(quotes: string, escapes: boolean): string {
    this.take(3);
    if (this.startsWith('\r\n')) this.take(2);
    else if (this.peek() === '\n') this.take();
    let out = '';
    for (;;) {
      if (this.startsWith(quotes)) {
        // Up to two quotes may end the content just before the closing three.
        let run = 3;
        while (this.peek(run) === quotes[0]) run++;
        if (run > 5) this.fail('too many quotes at the end of a multi-line string');
        out += this.take(run - 3);
        this.take(3);
        return out;
      }
      const char = this.take();
      if (char === '') this.fail('a multi-line string is not closed');
      if (escapes && char === '\\') {
        if (/^[ \t]*\r?\n/.test(this.text.slice(this.at, this.at + 256))) {
          this.gapWhitespace();
          continue;
        }
        out += this.escape();
      } else if (char === '\n' || char === '\r') out += char;
      else out += this.plain(char);
    }
  }

  private gapWhitespace(): void {
    while (/[ \t\r\n]/.test(this.peek())) this.take();
  }

  value(depth: number): TomlValue {
    if (depth > 64) this.fail('values nested more than 64 deep');
    const char = this.peek();
    if (char === '"') return this.basic();
    if (char === "'") return this.literal();
    if (char === '[') return this.array(depth);
    if (char === '{') return this.inlineTable(depth);
    const word = this.match(/^[0-9A-Za-z_+\-.:]+/) ?? this.fail('a value was expected');
    if (word === 'true') return true;
    if (word === 'false') return false;
    return this.number(word);
  }

  private number(word: string): number {
    const plain = word.replace(/_/g, '');
    if (/^\d{4}-\d{2}-\d{2}|^\d{2}:\d{2}/.test(word)) this.fail('dates and times are not read here');
    if (/(^|[^0-9A-Za-z])_|_($|[^0-9A-Za-z])|__/.test(word)) this.fail(`${word} is no number`);
    const based = /^0([xob])([0-9A-Fa-f]+)$/.exec(plain);
    if (based) {
      const radix = { x: 16, o: 8, b: 2 }[based[1] as 'x' | 'o' | 'b'];
      const digits = { 16: /^[0-9A-Fa-f]+$/, 8: /^[0-7]+$/, 2: /^[01]+$/ }[radix]!;
      if (!digits.test(based[2]!)) this.fail(`${word} is no number`);
      return this.safe(parseInt(based[2]!, radix), word);
    }
    if (/^[+-]?(0|[1-9]\d*)$/.test(plain)) return this.safe(Number(plain), word);
    if (/^[+-]?(inf|nan)$/.test(plain)) return plain.endsWith('inf') ? (plain[0] === '-' ? -Infinity : Infinity) : NaN;
    if (/^[+-]?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$/.test(plain) && /[.eE]/.test(plain)) return Number(plain);
    return this.fail(`${word} is no value`);
  }

  private safe(value: number, word: string): number {
    if (!Number.isSafeInteger(value)) this.fail(`${word} is past the integers read here`);
    return value;
  }

  private array(depth: number): TomlValue[] {
    this.take();
    const items: TomlValue[] = [];
    for (;;) {
      this.gap();
      if (this.peek() === ']') {
        this.take();
        return items;
      }
      items.push(this.value(depth + 1));
      this.gap();
      if (this.peek() === ',') this.take();
      else if (this.peek() !== ']') this.fail('an array item must be followed by , or ]');
    }
  }

  private inlineTable(depth: number): TomlTable {
    const line = this.line;
    this.take();
    const table = newTable(line);
    this.blank();
    if (this.peek() === '}') {
      this.take();
      return table;
    }
    for (;;) {
      const key = this.key();
      if (this.peek() !== '=') this.fail('= was expected after a key');
      this.take();
      this.blank();
      assign(this, table, key, this.value(depth + 1));
      this.blank();
      if (this.peek() === '}') {
        this.take();
        return table;
      }
      if (this.peek() !== ',') this.fail('an inline table item must be followed by , or }');
      this.take();
    }
  }
}

/** Tables made by [a.b] headers or dotted keys may be extended; inline tables and values may not. */
const sealed = new WeakSet<object>();
const implicit = new WeakSet<object>();

function assign(reader: Reader, table: TomlTable, key: string[], value: TomlValue): void {
  let current = table;
  for (const part of key.slice(0, -1)) {
    const next = Object.hasOwn(current, part) ? current[part] : undefined;
    if (next === undefined) {
      const made = newTable(reader.line);
      implicit.add(made);
      (current as Located)[LINES]![part] = reader.line;
      current = current[part] = made;
    } else if (typeof next === 'object' && !Array.isArray(next) && !sealed.has(next)) current = next;
    else reader.fail(`${key.join('.')}: ${part} is already a value`);
  }
  const last = key.at(-1)!;
  if (Object.hasOwn(current, last)) reader.fail(`${key.join('.')} is set twice`);
  current[last] = value;
  (current as Located)[LINES]![last] = reader.line;
  if (typeof value === 'object' && !Array.isArray(value)) sealed.add(value);
  if (Array.isArray(value)) sealed.add(value);
}

/** The table a [header] names, made as it goes; [[header]] appends a new table to an array of tables. */
function open(reader: Reader, root: TomlTable, key: string[], many: boolean, headed: WeakSet<object>): TomlTable {
  let current = root;
  for (const [i, part] of key.entries()) {
    const last = i === key.length - 1;
    let next = Object.hasOwn(current, part) ? current[part] : undefined;
    if (last && many) {
      if (next === undefined) {
        next = [];
        (current as Located)[LINES]![part] = reader.line;
        current[part] = next;
        tableArrays.add(next);
      }
      if (!Array.isArray(next) || !tableArrays.has(next)) reader.fail(`${key.join('.')} is not an array of tables`);
      const table = newTable(reader.line);
      next.push(table);
      return table;
    }
    if (next === undefined) {
      const made = newTable(reader.line);
      (current as Located)[LINES]![part] = reader.line;
      current[part] = made;
      next = made;
      if (!last) implicit.add(made);
    } else if (Array.isArray(next)) {
      if (!tableArrays.has(next) || last) reader.fail(`${key.join('.')} is already an array`);
      next = next.at(-1)!;
    } else if (typeof next !== 'object' || sealed.has(next)) reader.fail(`${key.join('.')} is already a value`);
    else if (last) {
      if (headed.has(next) || !implicit.has(next)) reader.fail(`[${key.join('.')}] is defined twice`);
      (next as Located)[OPENED] = reader.line;
    }
    current = next as TomlTable;
  }
  headed.add(current);
  implicit.delete(current);
  return current;
}

const tableArrays = new WeakSet<object>();

/** The document as a table; throws TomlError naming the line of what is not TOML (or not read here). */
export function parseToml(text: string): TomlTable {
  const reader = new Reader(text.replace(/^\uFEFF/, ''));
  const root = newTable(1);
  const headed = new WeakSet<object>();
  let current = root;
  for (;;) {
    reader.gap();
    if (reader.done) return root;
    if (reader.peek() === '[') {
      const many = reader.peek(1) === '[';
      reader.take(many ? 2 : 1);
      const key = reader.key();
      if (!reader.startsWith(many ? ']]' : ']')) reader.fail(`${many ? ']]' : ']'} was expected`);
      reader.take(many ? 2 : 1);
      current = open(reader, root, key, many, headed);
      reader.endOfLine();
      continue;
    }
    const key = reader.key();
    if (reader.peek() !== '=') reader.fail('= was expected after a key');
    reader.take();
    reader.blank();
    assign(reader, current, key, reader.value(0));
    reader.endOfLine();
  }
}
