// A look at JSON text before it is parsed: how deep it nests. Parsing a line of nothing but
// brackets builds a structure as deep as the line is long, and walking it (validation, the
// audit's redaction) recurses as deep: what a peer sends is measured first, in one pass.

/** True when `line` nests arrays and objects no deeper than `max`, strings aside. */
export function withinDepth(line: string, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < line.length; i++) {
    const c = line.charCodeAt(i);
    if (inString) {
      if (c === 92 /* \ */) i++;
      else if (c === 34 /* " */) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 123 /* { */ || c === 91 /* [ */) {
      if (++depth > max) return false;
    } else if (c === 125 /* } */ || c === 93 /* ] */) depth--;
  }
  return true;
}
