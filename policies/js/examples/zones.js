// zones: spreads pods across zones. Each pod goes to the zone with the most
// GPUs free for it, and there to the node with the most; GPUs with less than
// `minFreeMib` free are not used, and a multi-GPU exclusive pod gets GPUs that
// are all NVLink peers of one another, or waits. Nodes without a zone label
// are not used.
import { Cluster, Nvlink, assign, fail, info, parseConfig } from '../sdk/index.js';

const ZONE = 'topology.kubernetes.io/zone';

// config.json: {"minFreeMib": 0}
const CONFIG = { minFreeMib: { type: 'integer', default: 0, min: 0 } };

export function describe() {
  return info('zones', '0.1.0', 'Spread across zones; NVLink peers for multi-GPU pods', [ZONE]);
}

export function allocate(snapshot) {
  let config;
  try {
    config = parseConfig(snapshot.config, CONFIG);
  } catch (e) {
    fail(e.message);
  }
  const cluster = new Cluster(snapshot);
  const decisions = [];
  for (const pod of cluster.pendingInOrder()) {
    const want = cluster.want(pod);
    decisions.push(placeInZones(cluster, want, config.minFreeMib) ?? cluster.unplaced(want, Nvlink.Require));
  }
  return decisions;
}

function placeInZones(cluster, want, minFreeMib) {
  // Zones by GPUs free for this pod, most first (ties: zone name order).
  const zones = [...cluster.freeByLabel(ZONE, want)].sort((a, b) => b[1] - a[1]);
  for (const [zone] of zones) {
    let best = null;
    for (const node of cluster.eligible(want)) {
      if (cluster.label(node, ZONE) !== zone) continue;
      const usable = cluster
        .fittingGpus(node, want)
        .filter((gpu) => cluster.gpuNow(node, gpu).freeMib >= minFreeMib);
      const gpus = want.usesNvlink(Nvlink.Require)
        ? cluster.nvlinkClique(node, usable, want.count)
        : usable.length >= want.count
          ? usable.slice(0, want.count)
          : null;
      if (gpus !== null && (best === null || usable.length > best.room)) {
        best = { node, gpus, room: usable.length };
      }
    }
    if (best !== null) {
      cluster.commit(best.node, best.gpus, want);
      return assign(want.pod, best.node, best.gpus);
    }
  }
  return null;
}
