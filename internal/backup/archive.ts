// A tar (ustar) archive of plain files, written and read in memory: the backup is one file an
// operator can also list with `tar tvf`.

const BLOCK = 512;

export interface Entry {
  name: string;
  mode: number;
  data: Buffer;
}

function field(header: Buffer, offset: number, length: number, value: string): void {
  header.write(value, offset, Math.min(length, Buffer.byteLength(value)), 'ascii');
}

function octal(value: number, length: number): string {
  return `${value.toString(8).padStart(length - 1, '0')}\0`;
}

function headerFor(entry: Entry, mtime: number): Buffer {
  if (Buffer.byteLength(entry.name) > 100)
    throw new Error(`${entry.name}: names of more than 100 bytes are not archived`);
  const header = Buffer.alloc(BLOCK);
  field(header, 0, 100, entry.name);
  field(header, 100, 8, octal(entry.mode & 0o7777, 8));
  field(header, 108, 8, octal(0, 8));
  field(header, 116, 8, octal(0, 8));
  field(header, 124, 12, octal(entry.data.length, 12));
  field(header, 136, 12, octal(Math.floor(mtime / 1000), 12));
  field(header, 148, 8, '        ');
  field(header, 156, 1, '0');
  field(header, 257, 8, 'ustar\u000000');
  let sum = 0;
  for (const byte of header) sum += byte;
  field(header, 148, 8, `${sum.toString(8).padStart(6, '0')}\0 `);
  return header;
}

export function writeTar(entries: readonly Entry[], mtime = Date.now()): Buffer {
  const parts: Buffer[] = [];
  for (const entry of entries) {
    parts.push(headerFor(entry, mtime), entry.data, Buffer.alloc((BLOCK - (entry.data.length % BLOCK)) % BLOCK));
  }
  parts.push(Buffer.alloc(BLOCK * 2));
  return Buffer.concat(parts);
}

/**
 * The files of an archive `writeTar` wrote, read strictly: any byte not as `writeTar` leaves it (a header field, its
 * checksum, the padding after a file, the two zero blocks that end it, anything after them) is a damaged archive.
 * What the headers do not cover, the files' contents, the caller checks (the backup's manifest).
 */
export function readTar(archive: Buffer): Entry[] {
  const entries: Entry[] = [];
  let at = 0;
  for (;;) {
    if (at + 2 * BLOCK > archive.length) throw new Error('the backup is truncated');
    const header = archive.subarray(at, at + BLOCK);
    if (header.every((byte) => byte === 0)) break;
    const text = (offset: number, length: number) =>
      header
        .toString('ascii', offset, offset + length)
        .replace(/\0.*$/s, '')
        .trim();
    let sum = 0;
    header.forEach((byte, i) => (sum += i >= 148 && i < 156 ? 32 : byte));
    const checksum = header.toString('ascii', 148, 156);
    if (!/^[0-7]{6}\0 $/.test(checksum) || parseInt(checksum, 8) !== sum)
      throw new Error('the backup is damaged (a header checksum does not match)');
    if (header.toString('ascii', 257, 265) !== 'ustar\u000000' || header.toString('ascii', 156, 157) !== '0')
      throw new Error('the backup is damaged (a header is not a plain file of a ustar archive)');
    // A link target or a name prefix (which tar puts before the name) is never written: what is read is what tar shows.
    if (!header.subarray(157, 257).every((byte) => byte === 0) || !header.subarray(345, 500).every((b) => b === 0))
      throw new Error('the backup is damaged (a header names a link or uses the ustar name prefix)');
    const size = parseInt(text(124, 12), 8);
    if (!Number.isSafeInteger(size) || size < 0) throw new Error('the backup is damaged (a size is not a number)');
    const start = at + BLOCK;
    const end = start + Math.ceil(size / BLOCK) * BLOCK;
    if (end + 2 * BLOCK > archive.length) throw new Error('the backup is truncated');
    if (!archive.subarray(start + size, end).every((byte) => byte === 0))
      throw new Error('the backup is damaged (bytes after a file that should be zero are not)');
    entries.push({
      name: text(0, 100),
      mode: parseInt(text(100, 8), 8),
      // A view, not a copy: a backup holds the whole database, which need not be in memory twice.
      data: archive.subarray(start, start + size),
    });
    at = end;
  }
  if (at + 2 * BLOCK !== archive.length || !archive.subarray(at).every((byte) => byte === 0))
    throw new Error('the backup is damaged (it does not end where its last file does)');
  return entries;
}
