// The example policy of the README (examples/zones.js): zones from a label,
// NVLink required, a free-memory floor from config.json. The README shows
// this file and the policy verbatim; the last test keeps them in step.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { allocate, describe } from '../examples/zones.js';
import { PolicyError, setLogSink } from '../sdk/index.js';
import { assigned, decisionOf, node, request, snapshot, withFullNvlink, withLabels, withNvlink } from '../sdk/testing.js';

const ZONE = 'topology.kubernetes.io/zone';
const zoned = (n, zone) => withLabels(n, [[ZONE, zone]]);

test('asks for the zone label', () => {
  assert.deepEqual(describe().labelKeys, [ZONE]);
});

test('spreads pods across zones, the roomiest zone first', () => {
  const snap = snapshot(
    [
      zoned(withFullNvlink(node('a1', 4, 'NVIDIA H100', 81920)), 'a'),
      zoned(withFullNvlink(node('a2', 4, 'NVIDIA H100', 81920)), 'a'),
      zoned(withFullNvlink(node('b1', 4, 'NVIDIA H100', 81920)), 'b'),
      withFullNvlink(node('unlabelled', 8, 'NVIDIA H100', 81920)),
    ],
    ['ns/p0', 'ns/p1', 'ns/p2', 'ns/p3'].map((pod) => request(pod, 2, 'exclusive', 0)),
  );
  // Zone a has 8 free, b 4: p0 to a (a1), then a has 6 and b 4: p1 to a
  // (a2, the roomier), then 4 and 4: p2 to a (name order), p3 to b.
  assert.deepEqual(assigned(allocate(snap)).map(([, n]) => snap.nodes[n].name), ['a1', 'a2', 'a1', 'b1']);
});

test('NVLink required: a ring 0-1-2-3 does not hold three peers; the pod waits saying so', () => {
  const ring = zoned(withNvlink(node('ring', 4, 'NVIDIA A100', 40960), [[0, 1], [1, 2], [2, 3], [3, 0]]), 'a');
  const hgx = zoned(withFullNvlink(node('hgx', 8, 'NVIDIA A100', 40960)), 'b');
  for (const g of hgx.gpus.slice(0, 6)) g.held = true;
  const snap = snapshot([ring, hgx], [request('ns/three', 3, 'exclusive', 0), request('ns/two', 2, 'exclusive', 0)]);
  const d = allocate(snap);
  assert.deepEqual(decisionOf(d, 0), {
    tag: 'wait',
    val: { pod: 0, reason: 'no eligible node has 3 GPU(s) that are all NVLink peers of one another free right now' },
  });
  assert.deepEqual(assigned(d), [[1, 0, [0, 1]]], 'two of the ring are peers');
  hgx.gpus[5].held = false;
  hgx.gpus[4].held = false;
  assert.deepEqual(assigned(allocate(snap)), [[0, 1, [4, 5, 6]], [1, 0, [0, 1]]]);
});

test('the free-memory floor from config.json keeps pods off nearly full GPUs', () => {
  const n = zoned(node('a', 2, 'NVIDIA L4', 24000), 'a');
  n.gpus[0].sharedOwners = 1;
  n.gpus[0].allocatedMib = 20000n;
  const snap = snapshot([n], [request('ns/s', 1, 'shared', 2000)]);
  assert.deepEqual(assigned(allocate(snap)), [[0, 0, [0]]], 'no floor: the first GPU that fits');
  snap.config = '{"minFreeMib": 8000}';
  assert.deepEqual(assigned(allocate(snap)), [[0, 0, [1]]], 'GPU 0 has 4000 MiB free, under the floor');
  snap.config = '{"minFreeMib": 30000}';
  assert.equal(allocate(snap)[0].tag, 'wait');
});

test('config errors fail the round: an unknown key, a range error', () => {
  const lines = [];
  setLogSink((line) => lines.push(line));
  const snap = snapshot([zoned(node('a', 1, 'NVIDIA L4', 23034), 'a')], [request('ns/p', 1, 'exclusive', 0)]);
  snap.config = '{"minFreeMiB": 1}';
  assert.throws(() => allocate(snap), PolicyError);
  snap.config = '{"minFreeMib": -1}';
  assert.throws(() => allocate(snap), PolicyError);
  assert.deepEqual(lines, [
    'invalid policy config.json: unknown field `minFreeMiB`, expected one of `minFreeMib`: remove it or correct its name',
    'invalid policy config.json: `minFreeMib` is -1, below its minimum 0: give 0 or more',
  ]);
  setLogSink(() => {});
});

test('the README shows this policy and these tests verbatim', () => {
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  for (const file of ['../examples/zones.js', './zones.test.js']) {
    const text = readFileSync(new URL(file, import.meta.url), 'utf8');
    assert.ok(readme.includes(text.trimEnd()), `README.md lacks the text of ${file.slice(file.lastIndexOf('/') + 1)}`);
  }
});
