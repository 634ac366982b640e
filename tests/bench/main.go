// Command bench-e2e measures wasmgpu's controller side by side with
// kube-scheduler on a fresh local API server (tests/control-plane): N Ready
// nodes with 8 GPUs each, then M pods asking for one GPU each, created with
// bounded concurrency; it reports pods/s, the median and p99 latency from each
// pod's POST to its spec.nodeName seen by a watch, and the peak RSS (VmHWM) of
// the scheduling process. With --scenario dra the GPUs are DRA ResourceSlices
// and each pod asks through a ResourceClaim, and every allocation is checked
// after the run. See docs/BENCHMARKS.md.
//
//	bench-e2e run [flags]                the benchmark (run "bench-e2e run -h")
//	bench-e2e kube-scheduler ARGS...     kube-scheduler, built from the same modules
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	switch os.Args[1] {
	case "run":
		os.Exit(run(os.Args[2:]))
	case "kube-scheduler":
		os.Exit(runScheduler(os.Args[2:]))
	case "help", "-h", "--help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "bench-e2e: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  bench-e2e run [flags]              run the benchmark ("bench-e2e run -h" for the flags)
  bench-e2e kube-scheduler ARGS...   kube-scheduler v1.37 (the scheduler the benchmark compares with)
`)
}
