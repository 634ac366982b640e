// Part of the SDK: orders that must match the Rust SDK's.

/**
 * Compares two strings as Rust compares `str`s: by UTF-8 bytes, which is code
 * point order (JavaScript's `<` compares UTF-16 code units, which puts
 * characters past U+FFFF before U+E000–U+FFFF).
 */
export function compareText(a, b) {
  if (a === b) return 0;
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x !== y) {
      if (x >= 0xd800 && y >= 0xd800) {
        // Surrogates (code points past U+FFFF) go after U+E000–U+FFFF.
        x = x >= 0xe000 ? x - 0x800 : x + 0x2000;
        y = y >= 0xe000 ? y - 0x800 : y + 0x2000;
      }
      return x < y ? -1 : 1;
    }
  }
  return a.length < b.length ? -1 : a.length > b.length ? 1 : 0;
}

/** Higher priority first, then older, then by pod name (the SDK's order of pending pods). */
export function compareRequests(ra, rb) {
  if (ra.priority !== rb.priority) return rb.priority - ra.priority;
  const ca = BigInt(ra.createdMs);
  const cb = BigInt(rb.createdMs);
  if (ca !== cb) return ca < cb ? -1 : 1;
  return compareText(ra.pod, rb.pod);
}
