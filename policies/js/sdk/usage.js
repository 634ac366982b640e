// Part of the SDK: what each namespace holds, counted from the snapshot's
// running pods (the Rust SDK's `usage`): the shape fair-share policies weigh
// tenants by.

import { compareText } from './order.js';

/**
 * The GPUs held by each namespace with running pods, sorted by namespace
 * (byte order, as Rust sorts strings): `{ namespace, exclusiveGpus,
 * sharedMib, migInstances }`. A pod with `sharedMib` counts that much memory
 * per GPU it shares; otherwise each of its GPUs is a whole GPU or, when the
 * position is a MIG instance, an instance.
 */
export function usage(snapshot) {
  const byNamespace = snapshot.namespaces.map((namespace) => ({
    namespace,
    exclusiveGpus: 0,
    sharedMib: 0,
    migInstances: 0,
  }));
  for (const pod of snapshot.running) {
    const entry = byNamespace[pod.namespace];
    if (entry === undefined) continue;
    const node = snapshot.nodes[pod.node];
    const shared = Number(pod.sharedMib);
    for (const g of pod.gpus) {
      const gpu = node === undefined ? undefined : node.gpus[g];
      if (shared > 0) entry.sharedMib += shared;
      else if (gpu !== undefined && gpu.mig !== undefined) entry.migInstances += 1;
      else entry.exclusiveGpus += 1;
    }
  }
  return byNamespace
    .filter((u) => u.exclusiveGpus + u.migInstances > 0 || u.sharedMib > 0)
    .sort((a, b) => compareText(a.namespace, b.namespace));
}
