// Part of the SDK: the search behind `Cluster.placeClaims`, a port of the Rust
// SDK's `cluster/claims.rs` that must choose exactly what it chooses. A pod
// asking through ResourceClaims gets, on one eligible node, for every request
// of every claim, `count` distinct free candidates of one of its
// alternatives, within the claims' `matchAttribute` and `distinctAttribute`
// constraints. The host holds the choices to the rules of its validator
// (`wasmgpu_contract`'s `validate/claims.rs`); this search only makes choices
// those rules accept.
//
//  nodes: eligible ones with a candidate of the pod's first request
//    │  on each node, claim by claim (what earlier claims took is excluded,
//    │  no backtracking across claims):
//    │    alternative vectors in order (request 0's most significant; an
//    │    alternative with fewer usable candidates than its count skipped)
//    │      × matchAttribute values, ascending, per constraint
//    │        → depth-first pick: requests in order, candidates in
//    │          (node, gpu) order, distinctAttribute values once each;
//    │          the first complete pick wins
//    ▼
//  the node with the fewest (Tightest) or most (Loosest) idle whole GPUs
//  left after the pick; ties to the lowest index (Cluster.placeClaims)
//    ▼
//  commit (held exclusively, counted against the tenant) ─▶ assign with
//  one claim choice per (claim, request)
//
// `Cluster.preempt` searches the same nodes (`claimNodes`) and, once
// candidate victims are released on a node, the same way (`solveOn` over
// the free candidates).
//
// The functions take the `Cluster` whose round state they read (its `nodes`
// units, `snapshot`, eligible sets); the reasons are worded in index.js.

/**
 * Search steps (one device tried for one slot, or one combination of
 * alternatives and matchAttribute values tried) allowed per claim and node;
 * past them the node counts as not fitting the claim.
 */
export const SEARCH_STEPS = 4096;

/** Which candidates the search may take: those free as the round stands (and healthy). */
export const FREE = 'free';
/** Which candidates the search may take: every healthy one, as if the node were idle. */
export const HEALTHY = 'healthy';

const U32_MAX = 4294967295;

/**
 * Devices a claim asks for: the sum over its requests of their first
 * alternative's count (what `reason.asked` and the tenant limit count),
 * saturating at 2^32 − 1 as Rust's `u32::saturating_add`.
 */
export function claimDevices(claim) {
  let total = 0;
  for (const r of claim.requests) {
    const first = r.alternatives[0];
    total = Math.min(total + (first === undefined ? 0 : first.count), U32_MAX);
  }
  return total;
}

/**
 * The devices `request` asks for: its GPUResource's `count`, or for a DRA
 * request the sum over its claims' requests of each one's first
 * alternative's `count` (a later alternative may want another number).
 */
export function devicesOf(request) {
  if (request.ask.tag === 'gpus') return request.ask.val.count;
  let total = 0;
  for (const c of request.ask.val) total = Math.min(total + claimDevices(c), U32_MAX);
  return total;
}

/**
 * One constraint of a claim on one node: `distinct`; per request of the
 * claim whether it binds it (all of them when it names none; positions out
 * of range ignored); the values of the node's devices, by GPU position (the
 * first value listed for a device wins, as on the host).
 */
function bound(constraint, requests, node) {
  const binds = new Array(requests).fill(constraint.requests.length === 0);
  for (const r of constraint.requests) if (r < requests) binds[r] = true;
  const values = new Map();
  for (const v of constraint.values) {
    if (v.device.node === node && !values.has(v.device.gpu)) values.set(v.device.gpu, v.value);
  }
  return { distinct: constraint.distinct, binds, values };
}

/** Candidate set `set` of the snapshot (empty when out of range). */
function candidateSet(cluster, set) {
  return cluster.snapshot.candidateSets[set] ?? [];
}

/** The first position of `list` from `lo` on where `before(entry)` is false (`list` partitioned by it). */
function partitionPoint(list, lo, before) {
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (before(list[mid])) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The candidates of set `set` on `node` (the host sends a set sorted by node, then GPU). */
function candidatesOn(cluster, set, node) {
  const all = candidateSet(cluster, set);
  const start = partitionPoint(all, 0, (g) => g.node < node);
  const end = partitionPoint(all, start, (g) => g.node === node);
  return all.slice(start, end);
}

/**
 * Whether device `gpu` of `node` may be given to a DRA request: healthy (a
 * MIG instance with its parent), and for `FREE` free for exclusive use as the
 * round stands (not held, not shared, all its memory free; a whole GPU with
 * none of its MIG instances held, an instance with its parent not in use).
 * Whoever publishes it.
 */
export function draUsable(cluster, node, gpu, usable) {
  const gpus = cluster.snapshot.nodes[node].gpus;
  const info = gpus[gpu];
  if (info === undefined) return false;
  let parent;
  if (info.mig !== undefined) {
    parent = gpus[info.mig.parent];
    if (parent === undefined) return false;
  }
  if (!info.healthy || (parent !== undefined && !parent.healthy)) return false;
  if (usable === HEALTHY) return true;
  const u = cluster.nodes[node].units[gpu];
  const busy = u.parent >= 0 ? u.parentBusy : u.kidsHeld > 0;
  return !u.held && u.shares === 0 && u.free >= u.memory && !busy;
}

/**
 * The nodes to search for a pod with `claims`: its eligible nodes, and of
 * those only the ones with a candidate of its first request when every
 * alternative of that request wants at least one device; ascending.
 */
export function claimNodes(cluster, want, claims) {
  let first;
  for (const c of claims) {
    if (c.requests.length > 0) {
      first = c.requests[0];
      break;
    }
  }
  let nodes;
  if (first !== undefined && first.alternatives.every((a) => a.count > 0)) {
    const seen = new Set();
    for (const a of first.alternatives) for (const g of candidateSet(cluster, a.candidates)) seen.add(g.node);
    nodes = [...seen].sort((a, b) => a - b);
  } else {
    nodes = cluster.eligible(want).slice();
  }
  return nodes.filter((n) => n < cluster.nodes.length && cluster.isEligible(want, n));
}

/**
 * The choices for every claim of a pod on `node`, claim by claim, each
 * against the devices earlier claims took (`{ claim, request, alternative,
 * gpus }`, `gpus` a plain array in pick order); `null` when one fails.
 */
export function solveOn(cluster, node, claims, usable) {
  const taken = [];
  const choices = [];
  for (let c = 0; c < claims.length; c++) {
    const on = claimOn(cluster, node, claims[c], usable, taken);
    const steps = { left: SEARCH_STEPS };
    const got = solveClaim(cluster, node, on, c, steps);
    if (got === null) return null;
    for (const choice of got) {
      for (const g of choice.gpus) taken.push(g);
      choices.push(choice);
    }
  }
  return choices;
}

/**
 * `claim` on `node`, with what the pod's earlier claims took (`taken`): its
 * constraints bound to the node, and per request, per alternative, the
 * usable candidates (positions, in candidate order) that do not clash with
 * `taken` and have a value for every constraint binding the request.
 */
function claimOn(cluster, node, claim, usable, taken) {
  const requests = claim.requests.length;
  const bounds = claim.constraints.map((k) => bound(k, requests, node));
  const options = claim.requests.map((request, r) =>
    request.alternatives.map((a) => {
      const out = [];
      for (const ref of candidatesOn(cluster, a.candidates, node)) {
        const g = ref.gpu;
        if (!draUsable(cluster, node, g, usable)) continue;
        if (taken.some((t) => cluster.clash(node, t, g))) continue;
        if (!bounds.every((b) => !b.binds[r] || b.values.has(g))) continue;
        out.push(g);
      }
      return out;
    }),
  );
  return { claim, bounds, options };
}

/**
 * Advances `digits` (each below its `len(d)`) to the next combination, the
 * last digit fastest; false after the last one.
 */
function advance(digits, len) {
  for (let d = digits.length - 1; d >= 0; d--) {
    digits[d] += 1;
    if (digits[d] < len(d)) return true;
    digits[d] = 0;
  }
  return false;
}

/**
 * The first alternative vector (request 0's alternative most significant)
 * with a complete pick; alternatives with fewer options than their count are
 * skipped.
 */
function solveClaim(cluster, node, on, c, steps) {
  const requests = on.claim.requests;
  const viable = requests.map((request, r) => {
    const ks = [];
    for (let k = 0; k < request.alternatives.length; k++) {
      if (on.options[r][k].length >= request.alternatives[k].count) ks.push(k);
    }
    return ks;
  });
  if (viable.some((v) => v.length === 0)) return null;
  const digits = new Array(requests.length).fill(0);
  for (;;) {
    const alternatives = digits.map((d, r) => viable[r][d]);
    const picked = solveValues(cluster, node, on, alternatives, steps);
    if (picked !== null) {
      return picked.map((gpus, r) => ({ claim: c, request: r, alternative: alternatives[r], gpus }));
    }
    if (steps.left === 0 || !advance(digits, (r) => viable[r].length)) return null;
  }
}

/** Rust's order of `Option<u32>`: none first, then ascending. */
function compareValues(a, b) {
  if (a === undefined) return b === undefined ? 0 : -1;
  if (b === undefined) return 1;
  return a - b;
}

/**
 * Per constraint, the values to try under `alternatives` (wanting `counts`):
 * for a matchAttribute constraint, the values its requests' options have,
 * ascending; a single `undefined` (no restriction) for a distinctAttribute
 * one, or a matchAttribute one whose requests want no device.
 */
function matchValues(on, alternatives, counts) {
  return on.bounds.map((b) => {
    let wanted = 0;
    for (let r = 0; r < counts.length; r++) if (b.binds[r]) wanted += counts[r];
    if (b.distinct || wanted === 0) return [undefined];
    const values = [];
    for (let r = 0; r < counts.length; r++) {
      if (!b.binds[r]) continue;
      for (const g of on.options[r][alternatives[r]]) values.push(b.values.get(g));
    }
    values.sort(compareValues);
    return values.filter((v, i) => i === 0 || v !== values[i - 1]);
  });
}

/**
 * Per request, its options under `alternatives` that have, for every
 * constraint binding it whose value is chosen (`values`), that value.
 */
function allowed(on, alternatives, values) {
  return alternatives.map((k, r) =>
    on.options[r][k].filter((g) =>
      on.bounds.every((b, i) => !b.binds[r] || values[i] === undefined || b.values.get(g) === values[i]),
    ),
  );
}

/**
 * For the chosen `alternatives`, tries each combination of matchAttribute
 * values (`matchValues`, the last constraint fastest): the picks of the first
 * that succeeds, per request.
 */
function solveValues(cluster, node, on, alternatives, steps) {
  const counts = alternatives.map((k, r) => on.claim.requests[r].alternatives[k].count);
  const choices = matchValues(on, alternatives, counts);
  if (choices.some((v) => v.length === 0)) return null;
  const digits = new Array(choices.length).fill(0);
  for (;;) {
    if (steps.left === 0) return null;
    steps.left -= 1;
    const values = digits.map((d, b) => choices[b][d]);
    const pick = new Pick(cluster, node, on.bounds, counts, allowed(on, alternatives, values), steps);
    if (pick.fill(0, 0, 0)) return pick.picked;
    if (!advance(digits, (b) => choices[b].length)) return null;
  }
}

/** The state of one depth-first pick. */
class Pick {
  constructor(cluster, node, bounds, counts, allowedDevices, steps) {
    this.cluster = cluster;
    this.node = node;
    this.bounds = bounds;
    this.counts = counts;
    // Per request: the candidates allowed in this attempt.
    this.allowed = allowedDevices;
    this.picked = counts.map(() => []);
    // Per constraint: the values the picks of its requests use so far.
    this.used = bounds.map(() => []);
    this.steps = steps;
  }

  /** Fills request `r` from its `k`-th device on, trying its allowed candidates from position `from`. */
  fill(r, k, from) {
    if (r === this.counts.length) return true;
    if (k === this.counts[r]) return this.fill(r + 1, 0, 0);
    const need = this.counts[r] - k;
    const allowedHere = this.allowed[r];
    for (let i = from; i + need <= allowedHere.length; i++) {
      if (this.steps.left === 0) return false;
      this.steps.left -= 1;
      const g = allowedHere[i];
      if (this.fits(r, g)) {
        this.take(r, g);
        if (this.fill(r, k + 1, i + 1)) return true;
        this.untake(r, g);
      }
    }
    return false;
  }

  /** `g` clashes with no device picked so far, and its value is new to every distinctAttribute constraint binding `r`. */
  fits(r, g) {
    for (const list of this.picked) {
      for (const p of list) if (this.cluster.clash(this.node, p, g)) return false;
    }
    for (let b = 0; b < this.bounds.length; b++) {
      const bd = this.bounds[b];
      if (!(bd.distinct && bd.binds[r])) continue;
      const v = bd.values.get(g);
      if (v === undefined || this.used[b].includes(v)) return false;
    }
    return true;
  }

  take(r, g) {
    this.picked[r].push(g);
    for (let b = 0; b < this.bounds.length; b++) {
      const bd = this.bounds[b];
      if (!bd.binds[r]) continue;
      const v = bd.values.get(g);
      if (v !== undefined) this.used[b].push(v);
    }
  }

  untake(r, g) {
    this.picked[r].pop();
    for (let b = 0; b < this.bounds.length; b++) {
      const bd = this.bounds[b];
      if (bd.binds[r] && bd.values.has(g)) this.used[b].pop();
    }
  }
}

/**
 * Of candidate set `set`: how many candidates sit on nodes `want` may use,
 * and the most `usable` ones on one such node (a run of one node's
 * candidates, in set order).
 */
function tally(cluster, want, set, usable) {
  let total = 0;
  let most = 0;
  let runNode = -1;
  let run = 0;
  for (const g of candidateSet(cluster, set)) {
    const state = cluster.nodes[g.node];
    if (state === undefined || !(g.gpu < state.units.length) || !cluster.isEligible(want, g.node)) continue;
    total += 1;
    if (draUsable(cluster, g.node, g.gpu, usable)) {
      if (runNode === g.node) run += 1;
      else {
        runNode = g.node;
        run = 1;
      }
      most = Math.max(most, run);
    }
  }
  return { total, most };
}

/**
 * The first request of `claims` (claims, then requests, in order) that no
 * eligible node can give its count of `usable` candidates for any
 * alternative: `{ claim, request, count, total, most }` (the claim's and the
 * request's names, its first alternative's count, that alternative's
 * candidates on eligible nodes and the most of them usable on one node), or
 * `null`.
 */
export function bottleneck(cluster, want, claims, usable) {
  for (const claim of claims) {
    for (const r of claim.requests) {
      if (r.alternatives.some((a) => tally(cluster, want, a.candidates, usable).most >= a.count)) continue;
      const first = r.alternatives[0];
      const { total, most } = first === undefined ? { total: 0, most: 0 } : tally(cluster, want, first.candidates, usable);
      return { claim: claim.name, request: r.name, count: first === undefined ? 0 : first.count, total, most };
    }
  }
  return null;
}
