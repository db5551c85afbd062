// A look at JSON text before it is parsed: how deep it nests, and how many arrays and objects it opens. Parsing a
// line of nothing but brackets builds a structure as deep as the line is long, and walking it (validation, the
// audit's redaction) recurses as deep; and a parser spends some 75 bytes of heap on an empty object, 25 for each byte
// of its text, where a string costs about 4: what a peer sends is measured first, in one pass.

/** What is wrong with the shape of `line`, strings aside: nested deeper than `maxDepth`, or more than `maxOpened`
 * arrays and objects in all; null when neither. */
export function shapeProblem(line: string, maxDepth: number, maxOpened = Infinity): 'too_deep' | 'too_many' | null {
  let depth = 0;
  let opened = 0;
  let inString = false;
  for (let i = 0; i < line.length; i++) {
    const c = line.charCodeAt(i);
    if (inString) {
      if (c === 92 /* \ */) i++;
      else if (c === 34 /* " */) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 123 /* { */ || c === 91 /* [ */) {
      if (++depth > maxDepth) return 'too_deep';
      if (++opened > maxOpened) return 'too_many';
    } else if (c === 125 /* } */ || c === 93 /* ] */) depth--;
  }
  return null;
}

/** True when `line` nests arrays and objects no deeper than `max`, strings aside. */
export function withinDepth(line: string, max: number): boolean {
  return shapeProblem(line, max) === null;
}
