// Part of the SDK: the standard wording of `wait` and `reject` reasons, as the
// SDK's own placement writes them (byte for byte the Rust SDK's `reason`
// module), so users see one vocabulary whichever policy runs. The wording is
// for people: match on `Shortfall.kind`, not on these strings.

import { claimDevices } from './claims.js';

/**
 * A string as Rust's `{:?}` writes it: in double quotes, with `\`, `"`, tab,
 * CR, LF and NUL escaped, other control characters as `\u{…}`.
 */
export function rustDebugString(text) {
  let out = '"';
  for (const c of text) {
    const code = c.codePointAt(0);
    if (c === '\\') out += '\\\\';
    else if (c === '"') out += '\\"';
    else if (c === '\t') out += '\\t';
    else if (c === '\r') out += '\\r';
    else if (c === '\n') out += '\\n';
    else if (code === 0) out += '\\0';
    else if (code < 0x20 || (code >= 0x7f && code < 0xa0)) out += `\\u{${code.toString(16)}}`;
    else out += c;
  }
  return `${out}"`;
}

/**
 * What a request (or its `GpuShape`) asks for, in words: `2 GPU(s) matching
 * "NVIDIA H100*" with at least 40960 MiB each`, `1 GPU(s) with 8192 MiB to
 * share`, `1 MIG instance(s) of profile "1g.10gb"`; for a DRA request, per
 * claim the sum of its requests' first alternative's count: `2 device(s) for
 * claim ml/train`, `2 device(s) for claim ml/a, 1 device(s) for claim ml/b`
 * (`no devices: its claims are allocated already` for none).
 */
export function asked(request) {
  if (request.ask !== undefined && request.ask.tag === 'claims') {
    const claims = request.ask.val;
    if (claims.length === 0) return 'no devices: its claims are allocated already';
    return claims.map((c) => `${claimDevices(c)} device(s) for claim ${c.name}`).join(', ');
  }
  const shape = request.ask !== undefined ? request.ask.val : request;
  const model = shape.model !== undefined ? ` matching "${shape.model}"` : '';
  const mem = BigInt(shape.memoryMib);
  if (shape.migProfile !== undefined) {
    return `${shape.count} MIG instance(s) of profile ${rustDebugString(shape.migProfile)}${model}`;
  }
  if (shape.sharing === 'shared') {
    return `${shape.count} GPU(s)${model} with ${mem} MiB to share`;
  }
  if (mem === 0n) return `${shape.count} GPU(s)${model}`;
  return `${shape.count} GPU(s)${model} with at least ${mem} MiB each`;
}

/** `asked`, with the GPUs required to be NVLink peers of one another (`Nvlink.Require`). */
export function askedNvlink(request) {
  return `${asked(request)} that are all NVLink peers of one another`;
}

/** The request has no eligible node at all (a `reject` reason). */
export function noEligibleNode() {
  return 'no eligible node: node selector, affinity or taints exclude every GPU node';
}

/** No eligible node could hold `what` (an `asked` phrase) even with all of its GPUs free (a `reject` reason). */
export function never(what) {
  return `no eligible node has ${what}, even when idle`;
}

/** Some eligible node could hold `what` once GPUs are released, none can now (a `wait` reason). */
export function notNow(what) {
  return `no eligible node has ${what} free right now`;
}

/** Gang `gang` can never be placed: member `pod` fits nowhere, for `why` (a `reject` reason for every member). */
export function gangNever(gang, pod, why) {
  return `gang ${gang} can never be placed: member ${pod} fits nowhere (${why})`;
}

/** Gang `gang` is short: `fit` of the `need` more members it needs fit now (a `wait` reason for every member). */
export function gangShort(gang, fit, need, bound, minMember) {
  return `gang ${gang}: ${fit} of the ${need} more members needed fit now (${bound} bound, minMember ${minMember}); all or nothing, so none is placed yet`;
}

/** Gang `gang` is placed without this member (a `wait` reason for the members left over). */
export function gangPlacedWithout(gang, fit, need) {
  return `gang ${gang} is placed without this member (${fit} of ${need} needed fit); it waits for room`;
}

/** A pod whose tenant could not take its GPUs without passing its limit (a `wait` reason). */
export function overTenantLimit(tenant, held, limit, more) {
  return `tenant ${tenant} holds ${held} of its limit ${limit} GPUs (GPUTenant ${tenant}: spec.limit); this pod needs ${more} more`;
}

/** Pods of lower priority a pod could preempt are protected by a PodDisruptionBudget (appended to a `wait` reason). */
export function preemptionBlocked(protectedPods) {
  return `${protectedPods} pod(s) of lower priority it could preempt are protected by a PodDisruptionBudget now`;
}

/**
 * Pods of lower priority a pod could preempt are within their minimum runtime;
 * the first is past it in `seconds` (appended to a `wait` reason, after
 * `preemptionBlocked` when both apply).
 */
export function preemptionMinimumRuntime(young, seconds) {
  return `${young} pod(s) of lower priority it could preempt are within their minimum runtime (the first is past it in ${seconds} s)`;
}

/**
 * One request of a DRA claim, as what is missing: `2 device(s) for claim
 * ml/train request "gpus" (8 candidate(s) on eligible nodes)`: `count` is its
 * first alternative's, `candidates` how many of that alternative's candidates
 * sit on nodes the pod may use. Framed by `never` or `notNow`.
 */
export function claimRequest(claim, request, count, candidates) {
  return `${count} device(s) for claim ${claim} request ${rustDebugString(request)} (${candidates} candidate(s) on eligible nodes)`;
}

/**
 * A DRA pod's claims taken together (`asked`, an `asked` phrase), when each
 * request alone could be served but not all at once: with `constrained`
 * (some claim has constraints), `… within the claims' constraints`. Framed by
 * `never` or `notNow`.
 */
export function claimsTogether(asked, constrained) {
  return constrained ? `${asked} within the claims' constraints` : asked;
}

/** What follows a `notNow` of a `claimRequest`: the most of its candidates free on one eligible node. */
export function claimsMostFree(most) {
  return `at most ${most} free on any eligible node`;
}
