#!/usr/bin/env python3
"""The figures of `make bench`, written into docs/BENCHMARKS.md.

Runs `wasmgpu policy bench --output json` on every policy component built
(the Rust binpack and spread, and the JavaScript, Python and Go binpack
ports when `make policies-all` built them) on one generated snapshot, and
replaces the part of the page between the two markers below with a table of
the results, the bench binary's own output (native against Wasm, phase by
phase) and the machine's load, so the page's current figures are always the
last run's and never kept by hand. Older sections of the page are dated
records of what changed and what it measured then.

    figures.py --wasmgpu BIN --policy-dir DIR --snapshot FILE --doc PAGE [--bench-output FILE]
    figures.py --self-test     # the page rewriting, without running anything
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

BEGIN = "<!-- make bench: begin (written by tests/bench/figures.py; do not edit) -->"
END = "<!-- make bench: end -->"

# (component file, what it is, rounds, extra limits). The ports take longer
# per round; JavaScript needs more than the default deadline at this scale.
POLICIES = [
    ("wasmgpu_binpack.wasm", "binpack (Rust)", 50, []),
    ("wasmgpu_spread.wasm", "spread (Rust)", 50, []),
    ("binpack_go.wasm", "binpack (Go)", 5, []),
    ("binpack_py.wasm", "binpack (Python)", 5, []),
    ("binpack_js.wasm", "binpack (JavaScript)", 5, ["--deadline-ms", "8000", "--fuel", "40000000000"]),
]


def duration(micros):
    """Microseconds in the unit that reads best."""
    if micros >= 1_000_000:
        return f"{micros / 1_000_000:.2f} s"
    if micros >= 1_000:
        return f"{micros / 1_000:.2f} ms"
    return f"{micros:.0f} µs"


def fuel(units):
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if units >= size:
            return f"{units / size:.1f} {suffix}"
    return str(units)


def row(name, rounds, result):
    """One table row from `policy bench --output json`, or the reason there is none."""
    if isinstance(result, str):
        return f"| {name} | {result} |" + " |" * 6
    phases = result["phases"]

    def cell(phase):
        p = phases[phase]
        return f"{duration(p['medianMicros'])} ({duration(p['p99Micros'])})"

    return (
        f"| {name} | {rounds} | {fuel(result['fuelPerRound'])} | {cell('instantiate')} | "
        f"{cell('call')} | {cell('reset')} | {cell('validate')} | **{cell('round')}** |"
    )


def block(rows, bench_output, context):
    """The text between the markers."""
    lines = [
        BEGIN,
        "",
        f"Last `make bench`: {context}. Medians, p99 in brackets.",
        "",
        "| policy | rounds | fuel per round | instantiate | call (marshalling included) | reset | validate | full round |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    if bench_output:
        lines += [
            "`cargo test --release -p wasmgpu --bench round` (the Rust binpack compiled natively against the same in Wasm):",
            "",
            "```text",
            *bench_output.rstrip("\n").splitlines(),
            "```",
            "",
        ]
    lines.append(END)
    return "\n".join(lines)


def rewrite(page, text):
    """`page` with its marked part replaced by `text` (which carries the markers)."""
    start = page.find(BEGIN)
    end = page.find(END)
    if start < 0 or end < start:
        raise SystemExit(
            f"the page has no part between {BEGIN!r} and {END!r}: put the two markers, "
            "on lines of their own, where the figures go"
        )
    return page[:start] + text + page[end + len(END):]


def bench(wasmgpu, component, snapshot, rounds, limits):
    command = [wasmgpu, "policy", "bench", component, "--snapshot", snapshot,
               "--rounds", str(rounds), "--output", "json", *limits]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        return "failed: " + (done.stderr.strip().splitlines() or ["no message"])[-1]
    return json.loads(done.stdout)


def context(snapshot_summary):
    try:
        load = os.getloadavg()[0]
        load = f"load average {load:.1f}"
    except OSError:
        load = "load unknown"
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        rev = "unknown commit"
    day = datetime.date.today().isoformat()
    return (f"{day}, commit `{rev}`, {os.cpu_count()}-core {platform.machine()} machine, {load} "
            f"when it started; {snapshot_summary}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wasmgpu")
    parser.add_argument("--policy-dir")
    parser.add_argument("--snapshot")
    parser.add_argument("--doc")
    parser.add_argument("--bench-output", help="what the bench binary printed")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    for flag in ("wasmgpu", "policy_dir", "snapshot", "doc"):
        if getattr(args, flag) is None:
            parser.error(f"--{flag.replace('_', '-')} is required")
    rows, summary = [], "the snapshot"
    for file, name, rounds, limits in POLICIES:
        component = os.path.join(args.policy_dir, file)
        if not os.path.exists(component):
            rows.append(row(name, rounds, "not built (`make policies-all` builds it)"))
            continue
        print(f"==> policy bench {file} ({rounds} rounds)", file=sys.stderr)
        result = bench(args.wasmgpu, component, args.snapshot, rounds, limits)
        if not isinstance(result, str):
            s = result["snapshot"]
            summary = f"{s['nodes']:,} nodes, {s['gpus']:,} GPUs, {s['pending']:,} pending pods"
        rows.append(row(name, rounds, result))
    bench_output = None
    if args.bench_output:
        with open(args.bench_output, encoding="utf-8") as f:
            bench_output = f.read()
    with open(args.doc, encoding="utf-8") as f:
        page = f.read()
    text = block(rows, bench_output, context(summary))
    with open(args.doc, "w", encoding="utf-8") as f:
        f.write(rewrite(page, text))
    print(text)
    print(f"==> written into {args.doc}", file=sys.stderr)


def self_test():
    page = f"# Benchmarks\n\nbefore\n\n{BEGIN}\nold figures\n{END}\n\nafter\n"
    result = {"fuelPerRound": 33_200_000,
              "phases": {p: {"medianMicros": m, "p99Micros": m * 1.5}
                         for p, m in (("instantiate", 210.0), ("call", 6_600.0), ("reset", 40.0),
                                      ("validate", 900.0), ("round", 7_750.0))}}
    rows = [row("binpack (Rust)", 50, result), row("binpack (Go)", 5, "not built")]
    text = block(rows, "round: ...\n", "a day")
    new = rewrite(page, text)
    assert "old figures" not in new, new
    assert new.startswith("# Benchmarks\n\nbefore\n\n") and new.endswith("\n\nafter\n"), new
    assert "| binpack (Rust) | 50 | 33.2 M | 210 µs (315 µs) | 6.60 ms (9.90 ms) |" in new, new
    assert "| 40 µs (60 µs) | 900 µs (1.35 ms) |" in new, new
    assert "**7.75 ms (11.62 ms)**" in new, new
    assert "| binpack (Go) | not built |" in new, new
    assert rewrite(new, text) == new, "rewriting twice changes nothing"
    try:
        rewrite("# no markers\n", text)
    except SystemExit as error:
        assert "markers" in str(error)
    else:
        raise AssertionError("a page without markers is refused")
    print("figures.py: self-test passed")


if __name__ == "__main__":
    main()
