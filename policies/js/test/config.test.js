// parseConfig (declared fields: types, ranges, allowed values), the
// placement parameters (read as the Rust SDK's PlacementParams reads them)
// and the standard reason texts.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { allocate } from '../binpack/binpack.js';
import {
  PLACEMENT_DEFAULTS,
  PlacementParams,
  PolicyError,
  blankConfig,
  parseConfig,
  parsePlacementParams,
  placeEach,
  setLogSink,
} from '../sdk/index.js';
import { node, request, snapshot } from '../sdk/testing.js';

const FIELDS = {
  floorMib: { type: 'integer', default: 0, min: 0, max: 1048576 },
  weight: { type: 'number', default: 1.5, min: 0 },
  mode: { values: ['pack', 'spread'], default: 'pack' },
  zone: { type: 'string' },
  verbose: false,
};

test('empty config gives the defaults; given fields replace them', () => {
  assert.deepEqual(parseConfig('', FIELDS), { floorMib: 0, weight: 1.5, mode: 'pack', zone: undefined, verbose: false });
  assert.deepEqual(parseConfig(' \n\t ', FIELDS).floorMib, 0);
  const got = parseConfig('{"floorMib": 4096, "weight": 2, "mode": "spread", "zone": "z1", "verbose": true}', FIELDS);
  assert.deepEqual(got, { floorMib: 4096, weight: 2, mode: 'spread', zone: 'z1', verbose: true });
  assert.equal(typeof got.floorMib, 'number', 'JSON numbers are numbers');
  // An integer where a float is expected is fine; 1.0 is an integer.
  assert.equal(parseConfig('{"weight": 0}', FIELDS).weight, 0);
  assert.equal(parseConfig('{"floorMib": 1.0}', FIELDS).floorMib, 1);
  // The older form: defaults only, types taken from them.
  assert.deepEqual(parseConfig('{"limit": 0.25}', { limit: 3 }), { limit: 0.25 });
  assert.deepEqual(parseConfig('  ', { preferNvlink: true }), { preferNvlink: true });
});

test('an unknown key is refused, naming it and the known ones', () => {
  assert.throws(
    () => parseConfig('{"floorMiB": 1}', FIELDS),
    (e) =>
      e instanceof PolicyError &&
      e.message ===
        'invalid policy config.json: unknown field `floorMiB`, expected one of `floorMib`, `weight`, `mode`, `zone`, `verbose`: remove it or correct its name',
  );
  assert.throws(() => parseConfig('{"x": 1}', {}), /unknown field `x`, expected none \(this policy takes no parameters\)/);
});

test('range errors name the field, the bound and the fix', () => {
  assert.throws(
    () => parseConfig('{"floorMib": -1}', FIELDS),
    (e) =>
      e instanceof PolicyError &&
      e.message === 'invalid policy config.json: `floorMib` is -1, below its minimum 0: give 0 or more',
  );
  assert.throws(
    () => parseConfig('{"floorMib": 2000000}', FIELDS),
    /^PolicyError: invalid policy config.json: `floorMib` is 2000000, above its maximum 1048576: give 1048576 or less$/,
  );
  assert.throws(() => parseConfig('{"weight": -0.5}', FIELDS), /`weight` is -0.5, below its minimum 0/);
  assert.throws(() => parseConfig('{"weight": 1e999}', FIELDS), /`weight` is out of range/);
});

test('type errors and allowed values name the field and the fix', () => {
  const message = (config) => {
    try {
      parseConfig(config, FIELDS);
    } catch (e) {
      assert.ok(e instanceof PolicyError);
      assert.ok(e.message.startsWith('invalid policy config.json: '), e.message);
      return e.message;
    }
    assert.fail(`${config} was accepted`);
  };
  assert.equal(
    message('{"floorMib": 1.5}'),
    'invalid policy config.json: `floorMib` must be an integer, got 1.5: give a whole number, such as 0',
  );
  assert.equal(
    message('{"floorMib": "4096"}'),
    'invalid policy config.json: `floorMib` must be an integer, got "4096": give a whole number, such as 0',
  );
  assert.equal(message('{"weight": true}'), 'invalid policy config.json: `weight` must be a number, got true: give a JSON number, such as 0 or 0.5');
  assert.equal(message('{"verbose": "yes"}'), 'invalid policy config.json: `verbose` must be a boolean, got "yes": give true or false');
  assert.equal(
    message('{"mode": "fill"}'),
    'invalid policy config.json: `mode` must be one of "pack", "spread", got "fill": give one of those',
  );
  assert.equal(
    message('{"zone": null}'),
    'invalid policy config.json: `zone` must be a string, got null: give a JSON string in double quotes, or leave the field out',
  );
  assert.equal(message('{"mode": "pack", "mode": "spread"}'), 'invalid policy config.json: duplicate field `mode`: give each field once');
  assert.match(message('[1]'), /^invalid policy config.json: expected a JSON object, got \[1\]: give one, such as \{"floorMib":0,/);
  assert.match(message('{"floorMib": }'), /^invalid policy config.json: .*: write valid JSON, such as \{/);
  assert.equal(parseConfig('{"z": null}', { z: { type: 'string', nullable: true } }).z, null);
  assert.throws(() => parseConfig('', { z: { description: 'no type' } }), TypeError, 'a field needs a type or a default');
  assert.deepEqual(parseConfig('{"z": {"a": 1}}', { z: {} }).z, { a: 1 }, 'an empty object is a default');
  assert.throws(() => parseConfig('', { z: { type: 'float' } }), /needs a type/);
});

test('blank is what Rust calls whitespace', () => {
  assert.ok(blankConfig('') && blankConfig(' \t\r\n\u00a0\u0085\u3000'));
  assert.ok(!blankConfig('\ufeff'), 'a byte-order mark is not blank to Rust');
});

test('placement parameters: nvlink wins over preferNvlink; the Rust forms all read', () => {
  const mode = (config) => parsePlacementParams(config).nvlinkMode();
  assert.equal(mode(''), 'prefer');
  assert.equal(mode('{"preferNvlink": false}'), 'ignore');
  assert.equal(mode('{"nvlink": "require"}'), 'require');
  assert.equal(mode('{"nvlink": "prefer"}'), 'prefer');
  assert.equal(mode('{"nvlink": "ignore", "preferNvlink": true}'), 'ignore');
  assert.equal(mode('{"nvlink": null, "preferNvlink": false}'), 'ignore', 'null is not given');
  assert.equal(mode('{"nvlink": {"require": null}}'), 'require', 'serde reads a unit variant so too');
  assert.equal(mode('[false, "require", true]'), 'require', 'serde reads a struct from a list');
  assert.equal(mode('[false]'), 'ignore');
  assert.deepEqual(parsePlacementParams('{"preemption": false}'), new PlacementParams({ preemption: false }));
  assert.deepEqual(PLACEMENT_DEFAULTS, { preferNvlink: true, preemption: true });
  assert.throws(() => mode('{"nvlink": "always"}'), /`nvlink` must be one of "prefer", "require", "ignore", got "always"/);
  assert.throws(() => mode('{"nvlink": "Require"}'), PolicyError);
  assert.throws(
    () => mode('{"preferNvlink": true, "foo": 1}'),
    /unknown field `foo`, expected one of `preferNvlink`, `nvlink`, `preemption`/,
  );
  assert.throws(() => mode('{"nvlink": "prefer", "nvlink": "ignore"}'), /duplicate field `nvlink`/);
  assert.throws(() => mode('[true, null, true, 1]'), /this one has 4 entries/);
  assert.throws(() => mode('[null]'), /`preferNvlink` must be a boolean, got null/);
  assert.throws(() => mode('{"preemption": 1}'), /`preemption` must be a boolean, got 1/);
  assert.throws(() => mode('{"nvlink": {"require": 1}}'), PolicyError);
  assert.throws(() => mode('null'), /expected a JSON object, got null/);
  assert.throws(() => mode('\ufeff'), PolicyError);
});

test('a bad placement config fails the round and logs why', () => {
  const lines = [];
  setLogSink((line) => lines.push(line));
  const snap = snapshot([node('a', 1, 'NVIDIA H100', 81920)], [request('ns/a', 1, 'exclusive', 0)]);
  snap.config = '{"nvlink": "always"}';
  assert.throws(() => allocate(snap), PolicyError);
  assert.throws(() => placeEach(snap, 'loosest'), PolicyError);
  assert.match(lines[0], /^invalid policy config.json: `nvlink` must be one of/);
  setLogSink(() => {});
});

test('the reason texts are the Rust ones', async () => {
  const { reason } = await import('../sdk/index.js');
  const { draRequest } = await import('../sdk/testing.js');
  const r = request('ns/train', 4, 'exclusive', 40960);
  assert.equal(reason.notNow(reason.asked(r)), 'no eligible node has 4 GPU(s) with at least 40960 MiB each free right now');
  assert.equal(reason.asked(request('ns/s', 1, 'shared', 8192, { model: 'NVIDIA H100*' })), '1 GPU(s) matching "NVIDIA H100*" with 8192 MiB to share');
  assert.equal(reason.asked(request('ns/m', 1, 'exclusive', 0, { migProfile: '1g.10gb' })), '1 MIG instance(s) of profile "1g.10gb"');
  assert.equal(reason.asked(request('ns/m', 1, 'exclusive', 0, { migProfile: 'a"b\\c\n' })), '1 MIG instance(s) of profile "a\\"b\\\\c\\n"');
  assert.equal(reason.asked(draRequest('ns/d', [])), 'no devices: its claims are allocated already');
  const { claim } = await import('../sdk/testing.js');
  const two = draRequest('ml/p', [claim('ml/a', [['gpus', 2, 0]]), claim('ml/b', [['nic', 1, 1], ['more', 0, 1]])]);
  assert.equal(reason.asked(two), '2 device(s) for claim ml/a, 1 device(s) for claim ml/b');
  assert.equal(
    reason.never(reason.claimRequest('ml/train', 'gpus', 3, 2)),
    'no eligible node has 3 device(s) for claim ml/train request "gpus" (2 candidate(s) on eligible nodes), even when idle',
  );
  assert.equal(
    `${reason.notNow(reason.claimRequest('ml/train', 'gpus', 2, 2))}; ${reason.claimsMostFree(1)}`,
    'no eligible node has 2 device(s) for claim ml/train request "gpus" (2 candidate(s) on eligible nodes) free right now; at most 1 free on any eligible node',
  );
  assert.equal(reason.claimRequest('ml/c', 'a"b', 1, 0), '1 device(s) for claim ml/c request "a\\"b" (0 candidate(s) on eligible nodes)');
  assert.equal(
    reason.never(reason.claimsTogether('3 device(s) for claim ml/c', true)),
    "no eligible node has 3 device(s) for claim ml/c within the claims' constraints, even when idle",
  );
  assert.equal(reason.claimsTogether('2 device(s) for claim ml/both', false), '2 device(s) for claim ml/both');
  assert.equal(reason.askedNvlink(request('ns/p', 3, 'exclusive', 0)), '3 GPU(s) that are all NVLink peers of one another');
  assert.equal(reason.noEligibleNode(), 'no eligible node: node selector, affinity or taints exclude every GPU node');
  assert.equal(reason.never('x'), 'no eligible node has x, even when idle');
  assert.equal(
    reason.gangShort('ml/job', 2, 3, 1, 4),
    'gang ml/job: 2 of the 3 more members needed fit now (1 bound, minMember 4); all or nothing, so none is placed yet',
  );
  assert.equal(reason.gangNever('ml/job', 'ml/w1', 'why'), 'gang ml/job can never be placed: member ml/w1 fits nowhere (why)');
  assert.equal(reason.gangPlacedWithout('ml/job', 2, 2), 'gang ml/job is placed without this member (2 of 2 needed fit); it waits for room');
  assert.equal(reason.preemptionBlocked(2), '2 pod(s) of lower priority it could preempt are protected by a PodDisruptionBudget now');
  assert.equal(
    reason.preemptionMinimumRuntime(3, 2n),
    '3 pod(s) of lower priority it could preempt are within their minimum runtime (the first is past it in 2 s)',
  );
});
