// Part of the SDK: NVLink, how a multi-GPU exclusive request uses the links
// between GPUs (the Rust SDK's `Nvlink` and its groups and cliques).
//
// Two sets of GPUs on a node matter, and they differ:
//
// * an NVLink **group** (`Cluster.nvlinkGroups`) is a connected component of
//   the node's link graph: GPUs joined directly or through other GPUs. On an
//   HGX board the whole node is one group; with NVLink bridges each bridged
//   pair is a group; on a ring 0-1-2-3 the four GPUs are one group although
//   0 and 2 are not linked to each other.
// * an NVLink **clique** (`Cluster.nvlinkClique`) is a set of GPUs that are
//   all NVLink peers of one another: every pair linked directly. On the ring
//   above, {0, 1} is a clique and {0, 1, 2} is not.
//
// Two whole GPUs are peers when either's `nvlink` bit set has the other's
// index (a link joins both ends); MIG instances have no links.

/**
 * How `Cluster.pickGpus` (and everything that places through it) uses NVLink
 * for an exclusive request of more than one whole GPU; shared requests, MIG
 * requests and requests of one GPU are not affected.
 *
 * * `Prefer` (the default): the GPUs of one NVLink group when one on the node
 *   holds the request (the tightest group for `Fit.Tightest`, the largest for
 *   `Fit.Loosest`); when none does, any free GPUs of the node.
 * * `Require`: only GPUs that are all NVLink peers of one another (a clique);
 *   a node without such a set free does not fit, and a request no node can
 *   serve this way waits (or is rejected when no eligible node has one even
 *   when idle) with a reason that says NVLink is required.
 * * `Ignore`: the first free GPUs, by position.
 *
 * In config.json: `"nvlink": "prefer" | "require" | "ignore"`. Wherever a mode
 * is taken, a boolean works too: `true` is `Prefer`, `false` is `Ignore`.
 * The upper-case names are aliases.
 */
export const Nvlink = Object.freeze({
  Prefer: 'prefer',
  Require: 'require',
  Ignore: 'ignore',
  PREFER: 'prefer',
  REQUIRE: 'require',
  IGNORE: 'ignore',
});

/**
 * The NVLink mode `value` names: a mode string, or a boolean (`true` is
 * `'prefer'`, `false` is `'ignore'`); `undefined` is `'prefer'`, the default.
 */
export function nvlinkMode(value) {
  if (value === undefined || value === true) return 'prefer';
  if (value === false) return 'ignore';
  if (value === 'prefer' || value === 'require' || value === 'ignore') return value;
  throw new TypeError(`unknown NVLink mode ${JSON.stringify(value)}: expected 'prefer', 'require', 'ignore' or a boolean`);
}

/** The low and high 32 bits of a 64-bit NVLink set (a BigInt, or a number). */
export function halves(set) {
  if (typeof set === 'number') return [set >>> 0, Math.floor(set / 0x100000000) >>> 0];
  const v = BigInt.asUintN(64, BigInt(set));
  if (v === 0n) return [0, 0];
  return [Number(v & 0xffffffffn), Number(v >> 32n)];
}

/** Whether bit `i` (0–63) is set in `[lo, hi]`. */
export function hasBit(lo, hi, i) {
  return i < 32 ? ((lo >>> i) & 1) === 1 : i < 64 ? ((hi >>> (i - 32)) & 1) === 1 : false;
}

/**
 * Per position of `gpus` (a node's GPU list), whether each other position is
 * an NVLink peer: `rows[a][b]` is 1 when `a` and `b` are whole GPUs, `a !== b`,
 * and either names the other's index in its `nvlink` set.
 */
export function linkMatrix(gpus) {
  const n = gpus.length;
  const lo = new Array(n);
  const hi = new Array(n);
  for (let i = 0; i < n; i++) [lo[i], hi[i]] = halves(gpus[i].nvlink);
  const lists = (x, y) => {
    const gy = gpus[y];
    return gy.index < 64 && hasBit(lo[x], hi[x], gy.index);
  };
  const rows = new Array(n);
  for (let a = 0; a < n; a++) rows[a] = new Uint8Array(n);
  for (let a = 0; a < n; a++) {
    if (gpus[a].mig !== undefined) continue;
    for (let b = a + 1; b < n; b++) {
      if (gpus[b].mig !== undefined) continue;
      if (lists(a, b) || lists(b, a)) {
        rows[a][b] = 1;
        rows[b][a] = 1;
      }
    }
  }
  return rows;
}

/**
 * NVLink groups of `gpus` as a group id per position: the smallest position
 * of its connected component (a GPU's `nvlink` names its peers by index:
 * every whole GPU with that index; MIG instances are alone).
 */
export function groupIds(gpus) {
  const n = gpus.length;
  const parent = new Array(n);
  for (let i = 0; i < n; i++) parent[i] = i;
  const find = (i) => {
    while (parent[i] !== i) {
      parent[i] = parent[parent[i]];
      i = parent[i];
    }
    return i;
  };
  let byIndex = null;
  for (let i = 0; i < n; i++) {
    const g = gpus[i];
    if (g.mig !== undefined) continue;
    const [lo, hi] = halves(g.nvlink);
    if (lo === 0 && hi === 0) continue;
    if (byIndex === null) {
      byIndex = new Map();
      for (let p = 0; p < n; p++) {
        const other = gpus[p];
        if (other.mig !== undefined || other.index >= 64) continue;
        const list = byIndex.get(other.index);
        if (list === undefined) byIndex.set(other.index, [p]);
        else list.push(p);
      }
    }
    for (const [index, positions] of byIndex) {
      if (!hasBit(lo, hi, index)) continue;
      for (const p of positions) {
        const a = find(i);
        const b = find(p);
        if (a !== b) parent[Math.max(a, b)] = Math.min(a, b);
      }
    }
  }
  const ids = new Array(n);
  for (let i = 0; i < n; i++) ids[i] = find(i);
  return ids;
}

/**
 * The first set of `size` positions among `among` (in the order given) that
 * are all peers of one another in `rows` (a `linkMatrix`): the one that comes
 * first when sets are compared position by position in `among`'s order, in
 * that order; `null` when there is none. Only the first 64 of `among` count.
 */
export function clique(rows, among, size) {
  const list = among.slice(0, 64);
  if (size === 0) return [];
  if (list.length < size) return null;
  const open = [];
  for (let j = 0; j < list.length; j++) open.push(j);
  const linked = (x, y) => {
    const row = rows[list[x]];
    return row !== undefined && row[list[y]] === 1;
  };
  const found = extend(linked, [], open, size);
  return found === null ? null : found.map((j) => list[j]);
}

/** Grows `chosen` by `more` members of `open` (each a peer of all of `chosen`), lowest first; backtracks. */
function extend(linked, chosen, open, more) {
  if (more === 0) return chosen;
  for (let k = 0; open.length - k >= more; ) {
    const v = open[k++];
    const next = [];
    for (let j = k; j < open.length; j++) if (linked(v, open[j])) next.push(open[j]);
    const found = extend(linked, chosen.concat([v]), next, more - 1);
    if (found !== null) return found;
  }
  return null;
}
