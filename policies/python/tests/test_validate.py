"""`testing.validate`: a round's decisions held to the host's own rules
through `wasmgpu policy validate`, and the files it writes.

The tests that run the validator need the `wasmgpu` binary (`$WASMGPU`, else
`wasmgpu` on PATH; `make test-sdks` sets WASMGPU); without one they are
skipped, saying why."""

import os
import pathlib
import sys
import tempfile
import unittest
from unittest import mock

from wasmgpu_policy import EXCLUSIVE, SHARED, Fit, assign, place_each, preempt, reject, wait
from wasmgpu_policy.testing import (
    decisions_file, dra_request, large, node, request, running, snapshot, snapshot_file, validate, wasmgpu_cli,
)
from wit_world.imports import types as t

MODELS = ["NVIDIA L4"]


def two_gpus_two_pods():
    return snapshot(MODELS, [node("a", 2, 0, 23034)], [
        request("ns/p", 1, EXCLUSIVE, 0),
        request("ns/q", 1, EXCLUSIVE, 0),
    ])


class Files(unittest.TestCase):
    def test_decisions_are_written_in_serdes_tagged_form(self):
        claims = t.Decision_Assign(t.Assignment(3, 0, [], [t.ClaimChoice(0, 0, 1, [2])]))
        self.assertEqual(decisions_file([
            assign(0, 1, [0, 1]), wait(1, "no room"), reject(2, "never"), preempt(4, 0, [1], [3]), claims,
        ]), [
            {"assign": {"pod": 0, "node": 1, "gpus": [0, 1]}},
            {"wait": {"pod": 1, "reason": "no room"}},
            {"reject": {"pod": 2, "reason": "never"}},
            {"preempt": {"assignment": {"pod": 4, "node": 0, "gpus": [1]}, "victims": [3]}},
            {"assign": {"pod": 3, "node": 0, "gpus": [], "claims": [
                {"claim": 0, "request": 0, "alternative": 1, "gpus": [2]}]}},
        ])
        with self.assertRaisesRegex(TypeError, "is not a Decision"):
            decisions_file([("assign", 0)])

    def test_a_dra_request_is_written_with_its_claims(self):
        snap = snapshot(MODELS, [node("a", 2, 0, 23034)], [dra_request("ns/d")])
        snap.candidate_sets = [[t.GpuRef(0, 1)]]
        written = snapshot_file(snap)
        self.assertEqual(written["pending"][0]["ask"], {"claims": [{
            "name": "ns/d-gpu",
            "requests": [{"name": "gpu", "alternatives": [{"subrequest": None, "count": 1, "candidates": 0}]}],
            "constraints": [],
        }]})
        self.assertEqual(written["candidateSets"], [[{"node": 0, "gpu": 1}]])

    def test_no_binary_is_an_error_naming_both_places_and_the_fix(self):
        with mock.patch.dict(os.environ, {"PATH": "/nonexistent"}):
            os.environ.pop("WASMGPU", None)
            with self.assertRaises(FileNotFoundError) as e:
                validate(two_gpus_two_pods(), [])
        for words in ("$WASMGPU", "PATH", "make build", "WASMGPU=target/release/wasmgpu"):
            self.assertIn(words, str(e.exception))
        with mock.patch.dict(os.environ, {"WASMGPU": "/nonexistent/wasmgpu"}):
            with self.assertRaisesRegex(FileNotFoundError, "WASMGPU=/nonexistent/wasmgpu is not an executable"):
                wasmgpu_cli()

    def test_a_failing_binary_is_an_error_with_its_stderr(self):
        with tempfile.TemporaryDirectory() as tmp:
            for status, stderr, expected in [
                (1, "invalid snapshot: missing field nodes", "exit status 1.*missing field nodes"),
                (2, "error: unrecognized subcommand 'validate'", "too old: rebuild it"),
            ]:
                fake = pathlib.Path(tmp, f"wasmgpu-{status}")
                fake.write_text(f"#!/bin/sh\necho \"{stderr}\" >&2\nexit {status}\n")
                fake.chmod(0o755)
                with mock.patch.dict(os.environ, {"WASMGPU": str(fake)}):
                    with self.assertRaisesRegex(RuntimeError, expected):
                        validate(two_gpus_two_pods(), [])


class HostRules(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        try:
            wasmgpu_cli()
        except FileNotFoundError as e:
            print(f"\nskipping the host validator's tests: {e}", file=sys.stderr)
            raise unittest.SkipTest(str(e))

    def test_a_valid_round_lists_each_placement_by_name(self):
        snap = snapshot(MODELS, [node("a", 2, 0, 23034)], [
            request("ns/p", 2, EXCLUSIVE, 0),
            request("ns/q", 1, SHARED, 4000),
        ])
        decisions = place_each(snap, Fit.TIGHTEST)
        verdict = validate(snap, decisions)
        self.assertTrue(verdict["valid"], verdict)
        self.assertEqual(verdict["accepted"], [{"pod": "ns/p", "node": "a", "gpus": ["GPU-a-0", "GPU-a-1"]}])
        self.assertEqual([w["pod"] for w in verdict["waiting"]], ["ns/q"])
        self.assertEqual(verdict["refused"], [])

    def test_a_gpu_given_to_two_pods_exclusively_is_refused_once(self):
        snap = two_gpus_two_pods()
        verdict = validate(snap, [assign(0, 0, [0]), assign(1, 0, [0])])
        self.assertFalse(verdict["valid"])
        self.assertEqual(verdict["accepted"], [{"pod": "ns/p", "node": "a", "gpus": ["GPU-a-0"]}])
        self.assertEqual(len(verdict["refused"]), 1, verdict["refused"])
        refused = verdict["refused"][0]
        self.assertEqual((refused["index"], refused["pod"]), (1, "ns/q"))
        self.assertEqual(refused["reason"]["kind"], "gpu-taken")
        self.assertIn("GPU-a-0", refused["why"])

    def test_the_wrong_number_of_gpus_is_refused(self):
        verdict = validate(two_gpus_two_pods(), [assign(0, 0, [0, 1]), wait(1, "no room")])
        self.assertFalse(verdict["valid"])
        self.assertEqual([(r["pod"], r["reason"]["kind"]) for r in verdict["refused"]], [("ns/p", "wrong-count")])
        self.assertEqual((verdict["refused"][0]["reason"]["got"], verdict["refused"][0]["reason"]["want"]), (2, 1))
        self.assertEqual(verdict["waiting"], [{"pod": "ns/q", "reason": "no room"}])

    def test_a_preemption_of_a_pod_that_is_not_lower_is_refused(self):
        snap = two_gpus_two_pods()
        running(snap, "ns/r", 0, 0, [0])
        verdict = validate(snap, [preempt(0, 0, [0], [0])])
        self.assertEqual([r["reason"]["kind"] for r in verdict["refused"]], ["victim-not-lower"])
        snap.running[0].priority = -1
        verdict = validate(snap, [preempt(0, 0, [0], [0])])
        self.assertTrue(verdict["valid"], verdict)
        self.assertEqual(verdict["preempting"][0]["victims"], ["ns/r"])

    def test_the_sdks_rounds_pass_on_a_large_snapshot(self):
        snap = large(60, 200)
        for config in ("", '{"nvlink": "require"}'):
            snap.config = config
            verdict = validate(snap, place_each(snap, Fit.TIGHTEST))
            self.assertEqual(verdict["refused"], [], config)
            self.assertGreater(len(verdict["accepted"]), 50, config)


if __name__ == "__main__":
    unittest.main()
