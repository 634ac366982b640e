"""DRA requests: the search behind `Cluster.place_claims`,
`Cluster.claims_shortfall` and `Cluster.claims_unplaced` (the Rust SDK's
policies/sdk/src/cluster/claims.rs, decision for decision).

A pod asking through ResourceClaims gets, on one eligible node, for every
request of every claim, `count` distinct free candidates of one of its
alternatives, within the claims' `matchAttribute` and `distinctAttribute`
constraints:

    nodes: eligible ones with a candidate of the pod's first request
      |  on each node, claim by claim (what earlier claims took is excluded,
      |  no backtracking across claims):
      |    alternative vectors in order (request 0's most significant; an
      |    alternative with fewer usable candidates than its count skipped)
      |      x matchAttribute values, ascending, per constraint
      |        -> depth-first pick: requests in order, candidates in
      |           (node, gpu) order, distinctAttribute values once each;
      |           the first complete pick wins
      v
    the node with the fewest (TIGHTEST) or most (LOOSEST) idle whole GPUs
    left after the pick; ties to the lowest index
      v
    commit (held exclusively, counted against the tenant) -> assign with
    one ClaimChoice per (claim, request)

`Cluster.preempt` runs the same search for a DRA pod on each node of
`claim_nodes` as it releases lower-priority pods there (`solved_now`).

The functions here take the `Cluster` and read its round state; the public
methods are `Cluster`'s. Choices are `(claim, request, alternative, gpus)`
tuples until the winning node's become `ClaimChoice`s.
"""

from __future__ import annotations

import bisect
from operator import attrgetter
from typing import Dict, List, Optional, Tuple

from wit_world.imports import types as t

# Search steps (one device tried for one slot, or one combination of
# alternatives and matchAttribute values tried) allowed per claim and node;
# past them the node counts as not fitting the claim.
SEARCH_STEPS = 4096

# Which candidates the search may take: those free as the round stands (and
# healthy), or every healthy one, as if the node were idle.
FREE = "free"
HEALTHY = "healthy"

_U32 = (1 << 32) - 1
_NODE_OF, _GPU_OF, _VALUE_OF = attrgetter("device.node"), attrgetter("device.gpu"), attrgetter("value")
_NO_VALUES: Dict[int, int] = {}
_NO_GPUS: List[int] = []

Choice = Tuple[int, int, int, List[int]]


def claim_devices(claim: t.Claim) -> int:
    """Devices a claim asks for: the sum over its requests of their first
    alternative's count (what `reason.asked` and the tenant limit count)."""
    n = 0
    for r in claim.requests:
        if r.alternatives:
            n += r.alternatives[0].count
    return min(n, _U32)


def devices_of_claims(claims: List[t.Claim]) -> int:
    """`claim_devices` summed over `claims` (saturating at 2^32 - 1)."""
    return min(sum(claim_devices(c) for c in claims), _U32)


# --- what the snapshot says, built once per round ---


def candidates_by_node(cluster, set_: int) -> Dict[int, List[int]]:
    """Candidate set `set_` as node -> GPU positions there, in the set's
    order (empty when out of range). The host sends sets sorted by node,
    so a node's candidates are one run, as the Rust SDK reads them."""
    cache = cluster._dra_sets
    by_node = cache.get(set_)
    if by_node is None:
        by_node = {}
        sets = cluster.snapshot.candidate_sets
        if 0 <= set_ < len(sets):
            for g in sets[set_]:
                at = by_node.get(g.node)
                if at is None:
                    by_node[g.node] = [g.gpu]
                else:
                    at.append(g.gpu)
        cache[set_] = by_node
    return by_node


def constraint_info(cluster, constraint: t.Constraint) -> Tuple[int, Dict[int, Dict[int, int]]]:
    """A constraint's values: a number that equal lists of values share (for
    `claims_key`), and the values as node -> {gpu: value}, the first value
    listed for a device winning, as on the host."""
    cache = cluster._dra_values
    entry = cache.get(id(constraint))
    if entry is not None and entry[0] is constraint:
        return entry[1]
    values = constraint.values
    content = (tuple(map(_NODE_OF, values)), tuple(map(_GPU_OF, values)), tuple(map(_VALUE_OF, values)))
    known = cluster._dra_value_ids.get(content)
    if known is None:
        table: Dict[int, Dict[int, int]] = {}
        for node, gpu, value in zip(*content):
            on = table.get(node)
            if on is None:
                table[node] = {gpu: value}
            elif gpu not in on:
                on[gpu] = value
        known = cluster._dra_value_ids[content] = (len(cluster._dra_value_ids), table)
    cache[id(constraint)] = (constraint, known)
    return known


def parents(cluster, node: int) -> List[int]:
    """Per GPU position of `node`: its MIG parent's position (-1 for a whole
    GPU, and for an instance naming a parent out of range)."""
    cache = cluster._dra_parents
    par = cache.get(node)
    if par is None:
        par = cache[node] = [u.parent for u in cluster.nodes[node].units]
    return par


def healthy_mask(cluster, node: int) -> bytearray:
    """Per GPU position of `node`: 1 when it may be given to a DRA request
    at all: healthy, and a MIG instance's parent exists and is healthy.
    Whoever publishes it."""
    cache = cluster._dra_healthy
    mask = cache.get(node)
    if mask is None:
        gpus = cluster.snapshot.nodes[node].gpus
        n = len(gpus)
        mask = bytearray(n)
        for i, g in enumerate(gpus):
            if not g.healthy:
                continue
            if g.mig is not None:
                p = g.mig.parent
                if p >= n or not gpus[p].healthy:
                    continue
            mask[i] = 1
        cache[node] = mask
    return mask


def usable_mask(cluster, node: int, usable: str) -> bytearray:
    """Per GPU position of `node`: 1 when the search may take it. `HEALTHY`:
    `healthy_mask`. `FREE`: also free for exclusive use as the round stands
    (not held, not shared, all its memory free; a whole GPU with none of its
    MIG instances held, an instance with its parent not in use); remembered
    until a commit changes the node."""
    healthy = healthy_mask(cluster, node)
    if usable == HEALTHY:
        return healthy
    version = cluster._version[node]
    hit = cluster._dra_free.get(node)
    if hit is not None and hit[0] == version:
        return hit[1]
    mask = free_mask(cluster, node)
    cluster._dra_free[node] = (version, mask)
    return mask


def free_mask(cluster, node: int) -> bytearray:
    """`usable_mask(node, FREE)` as the node's units stand now, not as of its
    last commit (nothing remembered)."""
    mask = bytearray(healthy_mask(cluster, node))
    for i, u in enumerate(cluster.nodes[node].units):
        if mask[i] and (
            u.held or u.shares != 0 or u.free < u.memory or (u.busy if u.parent >= 0 else u.kids_held > 0)
        ):
            mask[i] = 0
    return mask


# --- what a pod's claims ask, as far as the search goes ---
#
# The search on a node reads, of the pod, only its claims' structure (counts,
# candidate sets, constraints: not the names), and of the node only the
# devices it may take, its MIG parents, the candidates of those sets there
# and the constraints' values there. Pods with one structure share a key;
# nodes that look the same to a key share its solutions, so alike nodes are
# searched once (their choices name the same positions).


def _intern(cluster, content) -> int:
    """A small number for `content` (equal contents, one number)."""
    ids = cluster._dra_intern
    found = ids.get(content)
    if found is None:
        found = ids[content] = len(ids)
    return found


def claims_key(cluster, claims: List[t.Claim]) -> int:
    """The key of `claims`: what the search on a node reads of them, as a
    number. `cluster._dra_key_parts[key]` holds the candidate sets the claims
    name and their constraints' value numbers (`constraint_info`), in order."""
    out = []
    sets = []
    values = []
    for c in claims:
        requests = []
        for r in c.requests:
            alternatives = []
            for a in r.alternatives:
                alternatives.append((a.count, a.candidates))
                sets.append(a.candidates)
            requests.append(tuple(alternatives))
        constraints = []
        for k in c.constraints:
            info = constraint_info(cluster, k)
            constraints.append((tuple(k.requests), k.distinct, info[0]))
            values.append(info)
        out.append((tuple(requests), tuple(constraints)))
    content = tuple(out)
    key = cluster._dra_keys.get(content)
    if key is None:
        key = cluster._dra_keys[content] = len(cluster._dra_key_parts)
        cluster._dra_key_parts.append((sets, values))
    return key


def _node_look(cluster, key: int, node: int) -> int:
    """How `node` looks to the search for claims key `key`, apart from the
    devices it may take: its MIG parents, the candidates there of each set
    the claims name, the constraints' values there; as a number."""
    at = (key, node)
    found = cluster._dra_looks.get(at)
    if found is None:
        sets, values = cluster._dra_key_parts[key]
        parts = [_static_id(cluster, "parents", node, None)]
        for s in sets:
            parts.append(_static_id(cluster, "set", node, s))
        for info in values:
            parts.append(_static_id(cluster, "values", node, info))
        found = cluster._dra_looks[at] = _intern(cluster, ("look",) + tuple(parts))
    return found


def _static_id(cluster, kind: str, node: int, what) -> int:
    """A number for one static part of how `node` looks (see `_node_look`)."""
    at = (kind, node, what[0] if kind == "values" else what)
    found = cluster._dra_parts.get(at)
    if found is None:
        if kind == "parents":
            content = ("parents",) + tuple(parents(cluster, node))
        elif kind == "set":
            content = ("set",) + tuple(candidates_by_node(cluster, what).get(node, _NO_GPUS))
        else:
            content = ("values",) + tuple(sorted(what[1].get(node, _NO_VALUES).items()))
        found = cluster._dra_parts[at] = _intern(cluster, content)
    return found


def _solution(cluster, key: int, node: int, claims: List[t.Claim], usable: str) -> Optional[List[Choice]]:
    """`solve_on(node, claims, usable)`, shared by the nodes that look the
    same to the search with the same devices usable."""
    return _solution_with(cluster, key, node, claims, usable_mask(cluster, node, usable))


def solved_now(cluster, key: int, node: int, claims: List[t.Claim]) -> Optional[List[Choice]]:
    """`solve_on(node, claims, FREE)` with the devices free as the node's
    units stand now (`free_mask`): for `Cluster.preempt`, which releases
    running pods on a node in place, without a commit, and puts them back.
    Shared like `_solution`."""
    return _solution_with(cluster, key, node, claims, free_mask(cluster, node))


def _solution_with(cluster, key: int, node: int, claims: List[t.Claim], mask: bytearray) -> Optional[List[Choice]]:
    """The choices on `node` with the devices of `mask` usable, shared by the
    nodes that look the same to the search with the same mask."""
    at = (key, _node_look(cluster, key, node), bytes(mask))
    memo = cluster._dra_solutions
    if at in memo:
        return memo[at]
    found = memo[at] = _solve_with(cluster, node, claims, mask)
    return found


def solved(cluster, key: int, node: int, claims: List[t.Claim]):
    """`solve_on(node, claims, FREE)` with the positions it picks (in pick
    order) and `idle_whole_after` them, remembered until a commit changes
    the node; None when the node does not fit."""
    memo = cluster._dra_memo
    version = cluster._version[node]
    hit = memo.get((key, node))
    if hit is not None and hit[0] == version:
        return hit[1]
    choices = _solution(cluster, key, node, claims, FREE)
    if choices is None:
        result = None
    else:
        positions = [g for choice in choices for g in choice[3]]
        result = (choices, positions, idle_whole_after(cluster, node, positions))
    memo[(key, node)] = (version, result)
    return result


def fitting(cluster, key: int, want, claims: List[t.Claim]) -> list:
    """The nodes `solved` fits, for pods with claims key `key` and `want`'s
    eligible set: `[seen, results, buckets]`, `results` the `solved` result
    per node of `claim_nodes`, `buckets` the nodes that fit by
    `idle_whole_after` (ascending lists), as of `cluster.touched[:seen]`:
    brought up to date with the nodes commits touched since, so that the
    nodes are not searched again for every pod."""
    at = (key, want.request.eligible_set)
    entry = cluster._dra_index.get(at)
    if entry is None:
        results = {}
        buckets: Dict[int, List[int]] = {}
        for node in claim_nodes(cluster, want, claims):  # ascending
            found = results[node] = solved(cluster, key, node, claims)
            if found is not None:
                buckets.setdefault(found[2], []).append(node)
        entry = cluster._dra_index[at] = [len(cluster.touched), results, buckets]
        return entry
    touched = cluster.touched
    if entry[0] < len(touched):
        results, buckets = entry[1], entry[2]
        for node in set(touched[entry[0]:]):
            if node not in results:
                continue
            old = results[node]
            found = results[node] = solved(cluster, key, node, claims)
            if old is not None:
                bucket = buckets[old[2]]
                del bucket[bisect.bisect_left(bucket, node)]
            if found is not None:
                bisect.insort(buckets.setdefault(found[2], []), node)
        entry[0] = len(touched)
    return entry


def fits_idle(cluster, key: int, want, claims: List[t.Claim]) -> bool:
    """Whether `solve_on(node, claims, HEALTHY)` finds choices on a node of
    `claim_nodes` (health does not change in a round: kept per claims key
    and eligible set)."""
    at = (key, want.request.eligible_set)
    found = cluster._dra_ever.get(at)
    if found is None:
        found = cluster._dra_ever[at] = any(
            _solution(cluster, key, n, claims, HEALTHY) is not None for n in claim_nodes(cluster, want, claims)
        )
    return found


# --- nodes ---


def claim_nodes(cluster, want, claims: List[t.Claim]) -> List[int]:
    """The nodes to search for a pod with `claims`: its eligible nodes, and of
    those only the ones with a candidate of its first request when every
    alternative of that request wants at least one device; ascending."""
    first = None
    for c in claims:
        if c.requests:
            first = c.requests[0]
            break
    if first is not None and all(a.count > 0 for a in first.alternatives):
        sets = tuple(a.candidates for a in first.alternatives)
    else:
        sets = None
    key = (want.request.eligible_set, sets)
    nodes = cluster._dra_nodes.get(key)
    if nodes is None:
        eligible = cluster.eligible_mask(want)
        if sets is not None:
            count = len(cluster.nodes)
            found = set()
            for s in sets:
                found.update(candidates_by_node(cluster, s))
            nodes = [n for n in sorted(found) if 0 <= n < count and eligible[n]]
        else:
            nodes = list(cluster.eligible(want))
        cluster._dra_nodes[key] = nodes
    return nodes


def idle_whole_after(cluster, node: int, positions: List[int]) -> int:
    """Idle whole GPUs of `node` (healthy, whoever publishes them, nobody
    holding any part) that stay idle when `positions` are taken."""
    par = parents(cluster, node)
    gone = set(positions)
    for p in positions:
        if par[p] >= 0:
            gone.add(par[p])
    info = cluster.snapshot.nodes[node].gpus
    idle = 0
    for i, u in enumerate(cluster.nodes[node].units):
        if (
            u.parent < 0
            and info[i].healthy
            and not u.held
            and u.shares == 0
            and u.kids_held == 0
            and u.free >= u.memory
            and i not in gone
        ):
            idle += 1
    return idle


# --- the search on one node ---


def solve_on(cluster, node: int, claims: List[t.Claim], usable: str) -> Optional[List[Choice]]:
    """The choices for every claim of a pod on `node`, claim by claim, each
    against the devices earlier claims took; None when one fails."""
    return _solve_with(cluster, node, claims, usable_mask(cluster, node, usable))


def _solve_with(cluster, node: int, claims: List[t.Claim], mask: bytearray) -> Optional[List[Choice]]:
    """`solve_on` with the devices of `mask` usable."""
    par = parents(cluster, node)
    has_mig = cluster.nodes[node].has_mig
    taken: List[int] = []
    choices: List[Choice] = []
    for c, claim in enumerate(claims):
        got = _solve_claim(cluster, node, claim, c, mask, par, has_mig, taken)
        if got is None:
            return None
        for ch in got:
            taken.extend(ch[3])
        choices.extend(got)
    return choices


def _solve_claim(cluster, node, claim, c, mask, par, has_mig, taken) -> Optional[List[Choice]]:
    """The first alternative vector (request 0's alternative most
    significant) with a complete pick; alternatives with fewer options than
    their count are skipped. Within SEARCH_STEPS."""
    requests = claim.requests
    nreq = len(requests)
    n = len(mask)
    # One constraint on this node: (distinct, binds per request, {gpu: value}).
    bounds = []
    for k in claim.constraints:
        binds = [not k.requests] * nreq
        for r in k.requests:
            if 0 <= r < nreq:
                binds[r] = True
        bounds.append((k.distinct, binds, constraint_info(cluster, k)[1].get(node, _NO_VALUES)))
    # What earlier claims took, and what clashes with it: those devices and
    # their MIG parents, and (below) the instances of those devices.
    took = set(taken)
    blocked = took
    if has_mig:
        blocked = set(took)
        for g in taken:
            if par[g] >= 0:
                blocked.add(par[g])
    # Per request, per alternative: the usable candidates on the node (in
    # candidate order) that do not clash with what earlier claims took and
    # have a value for every constraint binding the request.
    options: List[List[List[int]]] = []
    for r, request in enumerate(requests):
        need_values = [b[2] for b in bounds if b[1][r]]
        per_alt = []
        for a in request.alternatives:
            on = candidates_by_node(cluster, a.candidates).get(node, _NO_GPUS)
            opts = []
            for g in on:
                if g >= n or not mask[g] or g in blocked or (has_mig and par[g] >= 0 and par[g] in took):
                    continue
                if need_values and not all(g in values for values in need_values):
                    continue
                opts.append(g)
            per_alt.append(opts)
        options.append(per_alt)
    viable = []
    for r, request in enumerate(requests):
        alts = request.alternatives
        v = [k for k in range(len(alts)) if len(options[r][k]) >= alts[k].count]
        if not v:
            return None
        viable.append(v)
    steps = [SEARCH_STEPS]
    digits = [0] * nreq
    while True:
        alternatives = [viable[r][digits[r]] for r in range(nreq)]
        picked = _solve_values(requests, bounds, options, alternatives, par, has_mig, steps)
        if picked is not None:
            return [(c, r, alternatives[r], picked[r]) for r in range(nreq)]
        if steps[0] == 0 or not _advance(digits, [len(v) for v in viable]):
            return None


def _advance(digits: List[int], lens: List[int]) -> bool:
    """Advances `digits` (each below its `lens`) to the next combination, the
    last digit fastest; False after the last one."""
    for d in range(len(digits) - 1, -1, -1):
        digits[d] += 1
        if digits[d] < lens[d]:
            return True
        digits[d] = 0
    return False


def _solve_values(requests, bounds, options, alternatives, par, has_mig, steps) -> Optional[List[List[int]]]:
    """For the chosen `alternatives`, tries each combination of matchAttribute
    values (per constraint, the values its requests' options have,
    ascending, the last constraint fastest; a single "no restriction" for a
    distinctAttribute constraint or one whose requests want no device): the
    picks of the first that succeeds, per request."""
    nreq = len(requests)
    counts = [requests[r].alternatives[alternatives[r]].count for r in range(nreq)]
    opts = [options[r][alternatives[r]] for r in range(nreq)]
    choices = []
    for distinct, binds, values in bounds:
        wanted = 0
        for r in range(nreq):
            if binds[r]:
                wanted += counts[r]
        if distinct or wanted == 0:
            choices.append((None,))
            continue
        seen = set()
        for r in range(nreq):
            if binds[r]:
                for g in opts[r]:
                    seen.add(values[g])
        if not seen:
            return None
        choices.append(sorted(seen))
    # Per request: the distinctAttribute constraints binding it, as
    # (index into `used`, values).
    distinct_of = [[(b, bounds[b][2]) for b in range(len(bounds)) if bounds[b][0] and bounds[b][1][r]]
                   for r in range(nreq)]
    digits = [0] * len(bounds)
    lens = [len(ch) for ch in choices]
    while True:
        if steps[0] == 0:
            return None
        steps[0] -= 1
        allowed = []
        for r in range(nreq):
            keep = opts[r]
            for b, (_, binds, values) in enumerate(bounds):
                v = choices[b][digits[b]]
                if v is not None and binds[r]:
                    keep = [g for g in keep if values[g] == v]
            allowed.append(keep)
        picked = _fill(counts, allowed, distinct_of, len(bounds), par, has_mig, steps)
        if picked is not None:
            return picked
        if not _advance(digits, lens):
            return None


def _fill(counts, allowed, distinct_of, nbounds, par, has_mig, steps) -> Optional[List[List[int]]]:
    """The depth-first pick: requests in order, `counts[r]` slots each; a
    slot tries the request's allowed devices in order, from after the
    request's previous pick; a device clashing with one picked so far (the
    same, or a whole GPU and one of its instances), or whose value a
    distinctAttribute constraint binding the request has seen among the
    picks of its requests, is passed over. The first complete pick wins;
    each device tried costs a step."""
    nreq = len(counts)
    picked: List[List[int]] = [[] for _ in range(nreq)]
    taken = set()
    kids: Dict[int, int] = {}  # parent position -> picked instances of it
    used: List[List[int]] = [[] for _ in range(nbounds)]

    def fill(r: int, k: int, start: int) -> bool:
        while True:
            if r == nreq:
                return True
            if k < counts[r]:
                break
            r, k, start = r + 1, 0, 0
        mine = allowed[r]
        last = len(mine) - (counts[r] - k)
        distinct = distinct_of[r]
        out = picked[r]
        i = start
        while i <= last:
            if steps[0] == 0:
                return False
            steps[0] -= 1
            g = mine[i]
            i += 1
            if g in taken:
                continue
            p = -1
            if has_mig:
                p = par[g]
                if (p >= 0 and p in taken) or kids.get(g):
                    continue
            if distinct:
                clash = False
                for b, values in distinct:
                    if values[g] in used[b]:
                        clash = True
                        break
                if clash:
                    continue
                for b, values in distinct:
                    used[b].append(values[g])
            taken.add(g)
            if p >= 0:
                kids[p] = kids.get(p, 0) + 1
            out.append(g)
            if fill(r, k + 1, i):
                return True
            out.pop()
            if p >= 0:
                kids[p] -= 1
            taken.discard(g)
            for b, _ in distinct:
                used[b].pop()
        return False

    return picked if fill(0, 0, 0) else None


# --- explaining ---


def _usable_on(cluster, node: int, gpus: List[int], usable: str) -> int:
    """How many of `gpus` (positions of `node`, in range) are usable."""
    mask = usable_mask(cluster, node, usable)
    return sum(mask[g] for g in gpus)


def tally(cluster, want, set_: int, usable: str) -> Tuple[int, int]:
    """Of candidate set `set_`: how many candidates sit on nodes `want` may
    use, and the most `usable` ones on one such node (the set is sorted by
    node: a node's candidates are one run). Kept per set, eligible set and
    `usable`, brought up to date with the nodes commits touched since."""
    key = (set_, want.request.eligible_set, usable)
    entry = cluster._dra_tally.get(key)
    if entry is None:
        eligible = cluster.eligible_mask(want)
        units = cluster.nodes
        count = len(units)
        total = 0
        on: Dict[int, List[int]] = {}
        usable_on: Dict[int, int] = {}
        for node, gpus in candidates_by_node(cluster, set_).items():
            if node >= count or not eligible[node]:
                continue
            n = len(units[node].units)
            known = [g for g in gpus if g < n]
            if known:
                total += len(known)
                on[node] = known
                usable_on[node] = _usable_on(cluster, node, known, usable)
        entry = cluster._dra_tally[key] = [len(cluster.touched), total, on, usable_on]
    elif usable == FREE and entry[0] < len(cluster.touched):
        on, usable_on = entry[2], entry[3]
        for node in set(cluster.touched[entry[0]:]):
            if node in on:
                usable_on[node] = _usable_on(cluster, node, on[node], usable)
        entry[0] = len(cluster.touched)
    return entry[1], max(entry[3].values(), default=0)


def bottleneck(cluster, want, claims: List[t.Claim], usable: str, claim_request) -> Optional[Tuple[str, int]]:
    """The first request of `claims` that no eligible node can give its count
    of `usable` candidates for any alternative: its phrase
    (`claim_request(claim, request, count, candidates)`), and the most
    usable candidates of its first alternative on one node."""
    for claim in claims:
        for r in claim.requests:
            if any(tally(cluster, want, a.candidates, usable)[1] >= a.count for a in r.alternatives):
                continue
            if r.alternatives:
                first = r.alternatives[0]
                count = first.count
                total, most = tally(cluster, want, first.candidates, usable)
            else:
                count = total = most = 0
            return claim_request(claim.name, r.name, count, total), most
    return None
