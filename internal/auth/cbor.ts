// The little of CBOR (RFC 8949) that WebAuthn speaks: integers, byte and text strings, arrays, maps, true, false and
// null, of definite length. Anything else (floats, tags, indefinite lengths), or anything past a bound, is refused:
// what an authenticator sends through a browser is read as hostile as any other input.

export type Cbor = number | Uint8Array | string | Cbor[] | Map<Cbor, Cbor> | boolean | null;

export class CborRefused extends Error {}

const MAX_DEPTH = 8;
const MAX_ITEMS = 256;

/** Reads one item of `bytes` from `offset`: it, and the offset after it. Throws `CborRefused`. */
export function decodeCbor(bytes: Uint8Array, offset = 0, depth = 0): { value: Cbor; end: number } {
  if (depth > MAX_DEPTH) throw new CborRefused('it nests too deep');
  const view = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const need = (count: number) => {
    if (offset + count > view.length) throw new CborRefused('it ends too soon');
  };
  need(1);
  const initial = view[offset++]!;
  const major = initial >> 5;
  const info = initial & 31;
  let length: number;
  if (info < 24) length = info;
  else if (info === 24) (need(1), (length = view[offset]!), (offset += 1));
  else if (info === 25) (need(2), (length = view.readUInt16BE(offset)), (offset += 2));
  else if (info === 26) (need(4), (length = view.readUInt32BE(offset)), (offset += 4));
  else if (info === 27) {
    need(8);
    const big = view.readBigUInt64BE(offset);
    if (big > BigInt(Number.MAX_SAFE_INTEGER)) throw new CborRefused('a number is too large');
    length = Number(big);
    offset += 8;
  } else throw new CborRefused('an indefinite length, or a reserved one');
  switch (major) {
    case 0:
      return { value: length, end: offset };
    case 1:
      return { value: -1 - length, end: offset };
    case 2:
      need(length);
      return { value: new Uint8Array(view.subarray(offset, offset + length)), end: offset + length };
    case 3:
      need(length);
      return { value: view.toString('utf8', offset, offset + length), end: offset + length };
    case 4: {
      if (length > MAX_ITEMS) throw new CborRefused('an array is too long');
      const items: Cbor[] = [];
      for (let i = 0; i < length; i++) {
        const item = decodeCbor(bytes, offset, depth + 1);
        items.push(item.value);
        offset = item.end;
      }
      return { value: items, end: offset };
    }
    case 5: {
      if (length > MAX_ITEMS) throw new CborRefused('a map is too long');
      const map = new Map<Cbor, Cbor>();
      for (let i = 0; i < length; i++) {
        const key = decodeCbor(bytes, offset, depth + 1);
        const value = decodeCbor(bytes, key.end, depth + 1);
        if (typeof key.value !== 'number' && typeof key.value !== 'string')
          throw new CborRefused('a map key is neither a number nor a text');
        if (map.has(key.value)) throw new CborRefused('a map key is given twice');
        map.set(key.value, value.value);
        offset = value.end;
      }
      return { value: map, end: offset };
    }
    case 7:
      if (info === 20) return { value: false, end: offset };
      if (info === 21) return { value: true, end: offset };
      if (info === 22) return { value: null, end: offset };
      throw new CborRefused('a float or simple value, which WebAuthn does not send here');
    default:
      throw new CborRefused('a tag, which WebAuthn does not send here');
  }
}
