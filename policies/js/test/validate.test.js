// `validate`: a round's decisions held to the host's own rules through
// `wasmgpu policy validate`, and the files it writes (`snapshotFile`,
// `decisionsFile`).
//
// The tests that run the validator need the `wasmgpu` binary (`$WASMGPU`,
// else `wasmgpu` on PATH; `make test-sdks` sets WASMGPU); without one they
// are skipped, saying why.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { isDeepStrictEqual } from 'node:util';

import { Fit, assign, placeEach, preempt, reject, wait } from '../sdk/index.js';
import {
  decisionsFile,
  draRequest,
  gang,
  large,
  node,
  request,
  running,
  snapshot,
  snapshotFile,
  tenant,
  validate,
  wasmgpuCli,
  wasmgpuMissing,
  withLabels,
  withMig,
  withNvlink,
} from '../sdk/testing.js';

const missing = wasmgpuMissing();
if (missing) console.log(`# skipping the tests that run \`wasmgpu policy validate\`: ${missing}`);

const twoGpusTwoPods = () =>
  snapshot([node('a', 2, 'NVIDIA L4', 23034)], [request('ns/p', 1, 'exclusive', 0), request('ns/q', 1, 'exclusive', 0)]);

// Runs `f` with these environment variables (undefined: unset), then puts them back.
function withEnv(vars, f) {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  const set = (values) => {
    for (const [k, v] of Object.entries(values)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  };
  set(vars);
  try {
    return f();
  } finally {
    set(saved);
  }
}

test("decisions are written in serde's externally tagged form", () => {
  const withClaims = { tag: 'assign', val: { pod: 3, node: 0, gpus: [], claims: [{ claim: 0, request: 0, alternative: 1, gpus: [2] }] } };
  assert.deepEqual(decisionsFile([assign(0, 1, [0, 1]), wait(1, 'no room'), reject(2, 'never'), preempt(4, 0, [1], [3]), withClaims]), [
    { assign: { pod: 0, node: 1, gpus: [0, 1] } },
    { wait: { pod: 1, reason: 'no room' } },
    { reject: { pod: 2, reason: 'never' } },
    { preempt: { assignment: { pod: 4, node: 0, gpus: [1] }, victims: [3] } },
    { assign: { pod: 3, node: 0, gpus: [], claims: [{ claim: 0, request: 0, alternative: 1, gpus: [2] }] } },
  ]);
  assert.throws(() => decisionsFile([['assign', 0]]), /decision 0 .* is not a Decision/);
});

test('a snapshot file names GPUs, labels by key, sets as positions, NVLink as indices', () => {
  const a = withLabels(withNvlink(node('a', 2, 'NVIDIA L4', 23034), [[0, 1]]), [['topology.kubernetes.io/zone', 'z1']]);
  const m = withMig(node('m', 1, 'NVIDIA A100', 40960), 0, [['1g.5gb', 4864]]);
  const snap = snapshot([a, m], [request('ns/p', 1, 'shared', 4096, { model: 'NVIDIA L4*' }), draRequest('ns/d')]);
  snap.candidateSets = [[{ node: 1, gpu: 1 }]];
  const file = snapshotFile(snap);
  assert.equal(file.contract, 'wasmgpu:policy@0.3.0');
  assert.deepEqual(file.nodes[0].labels, { 'topology.kubernetes.io/zone': 'z1' });
  assert.deepEqual(file.nodes[1].labels, {});
  assert.deepEqual(
    file.nodes.flatMap((n) => n.gpus.map((g) => [g.uuid, g.nvlink, g.mig])),
    [
      ['GPU-a-0', [1], null],
      ['GPU-a-1', [0], null],
      ['GPU-m-0', [], null],
      ['MIG-GPU-m-0-0', [], { parent: 0, profile: 0 }],
    ],
  );
  assert.deepEqual(file.eligibleSets, [[0, 1]]);
  assert.deepEqual(file.pending[0].ask, {
    gpus: { count: 1, model: 'NVIDIA L4*', migProfile: null, memoryMiB: 4096, sharing: 'shared' },
  });
  assert.deepEqual(file.pending[1].ask, { claims: [] });
  assert.equal(file.pending[0].preemption, 'PreemptLowerPriority');
  assert.deepEqual(file.candidateSets, [[{ node: 1, gpu: 1 }]]);
  // Plain JSON: no BigInt left.
  assert.equal(typeof JSON.stringify(file), 'string');
});

test('no binary is an error naming both places and the fix', () => {
  const error = withEnv({ WASMGPU: undefined, PATH: '/nonexistent' }, () => {
    try {
      validate(twoGpusTwoPods(), []);
    } catch (e) {
      return e;
    }
    return undefined;
  });
  assert.ok(error, 'validate ran without a binary');
  assert.equal(error.code, 'ENOENT');
  for (const words of ['$WASMGPU', 'PATH', 'make build', 'WASMGPU=target/release/wasmgpu']) {
    assert.ok(error.message.includes(words), `${JSON.stringify(words)} not in: ${error.message}`);
  }
  assert.throws(() => withEnv({ WASMGPU: '/nonexistent/wasmgpu' }, wasmgpuCli), /WASMGPU=\/nonexistent\/wasmgpu is not an executable/);
});

test('a failing binary is an error with its stderr', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wasmgpu-fake-'));
  try {
    for (const [status, stderr, expected] of [
      [1, 'invalid snapshot: missing field nodes', /exit status 1.*missing field nodes/],
      [2, "error: unrecognized subcommand 'validate'", /too old: rebuild it/],
    ]) {
      const fake = join(dir, `wasmgpu-${status}`);
      writeFileSync(fake, `#!/bin/sh\necho "${stderr}" >&2\nexit ${status}\n`);
      chmodSync(fake, 0o755);
      assert.throws(() => withEnv({ WASMGPU: fake }, () => validate(twoGpusTwoPods(), [])), expected);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a valid round: valid, the placement listed by name', { skip: missing }, () => {
  const verdict = validate(twoGpusTwoPods(), [assign(0, 0, [1]), wait(1, 'later')]);
  assert.equal(verdict.valid, true);
  assert.deepEqual(verdict.accepted, [{ pod: 'ns/p', node: 'a', gpus: ['GPU-a-1'] }]);
  assert.deepEqual(verdict.waiting, [{ pod: 'ns/q', reason: 'later' }]);
  assert.deepEqual([verdict.preempting, verdict.rejected, verdict.refused], [[], [], []]);
});

test('one GPU given to two pods exclusively: refused once, saying who holds it', { skip: missing }, () => {
  const verdict = validate(twoGpusTwoPods(), [assign(0, 0, [0]), assign(1, 0, [0])]);
  assert.equal(verdict.valid, false);
  assert.equal(verdict.refused.length, 1, JSON.stringify(verdict.refused));
  const [refused] = verdict.refused;
  assert.deepEqual([refused.index, refused.pod, refused.reason.kind], [1, 'ns/q', 'gpu-taken']);
  assert.match(refused.why, /GPU-a-0/);
  assert.deepEqual(verdict.accepted, [{ pod: 'ns/p', node: 'a', gpus: ['GPU-a-0'] }]);
});

test('a wrong GPU count is refused', { skip: missing }, () => {
  const snap = snapshot([node('a', 4, 'NVIDIA L4', 23034)], [request('ns/two', 2, 'exclusive', 0)]);
  const verdict = validate(snap, [assign(0, 0, [0])]);
  assert.equal(verdict.valid, false);
  assert.deepEqual(verdict.refused.map((r) => [r.pod, r.reason.kind]), [['ns/two', 'wrong-count']]);
  assert.deepEqual(verdict.accepted, []);
});

test("binpack's round on a large cluster passes the host's rules", { skip: missing }, () => {
  const snap = large(40, 80);
  const verdict = validate(snap, placeEach(snap, Fit.Tightest));
  assert.deepEqual(verdict.refused, []);
  assert.ok(verdict.accepted.length > 20, `${verdict.accepted.length} accepted`);
});

test('the host reads a snapshot file back as written', { skip: missing }, () => {
  const snap = large(9, 20);
  running(snap, 'team-0/r0', 1, 0, [0, 1], 5);
  gang(snap, 'team-1/g', 2, [1, 8]);
  snap.tenants.push(tenant('ml', { limit: 4, holding: 1 }));
  snap.pending[3].tenant = 0;
  snap.pending[4].preemption = 'never';
  snap.config = '{"nvlink": "require"}';
  const dir = mkdtempSync(join(tmpdir(), 'wasmgpu-roundtrip-'));
  try {
    const written = snapshotFile(snap);
    writeFileSync(join(dir, 'in.json'), JSON.stringify(written));
    // upgrade-snapshot reads the file as the host does and writes it in today's form.
    execFileSync(wasmgpuCli(), ['policy', 'upgrade-snapshot', join(dir, 'in.json'), '-o', join(dir, 'out.json')], { stdio: 'pipe' });
    const read = JSON.parse(readFileSync(join(dir, 'out.json'), 'utf8'));
    assert.ok(isDeepStrictEqual(read, written), 'the host rewrote the snapshot file differently');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
