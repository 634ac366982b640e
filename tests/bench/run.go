package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	namespace   = "bench"
	gpusPerNode = 8
	h100        = "NVIDIA H100 80GB HBM3"
	h100MiB     = 81559
	readyPrefix = "wasmgpu control plane ready:"
)

var (
	gpuNodes     = schema.GroupVersionResource{Group: "wasmgpu.io", Version: "v1alpha1", Resource: "gpunodes"}
	gpuResources = schema.GroupVersionResource{Group: "wasmgpu.io", Version: "v1alpha1", Resource: "gpuresources"}
)

type config struct {
	controlPlane      string
	wasmgpu           string
	policy            string
	crds              string
	work              string
	scales            []scale
	schedulers        []string
	repeat            int
	createConcurrency int
	createRate        float64 // pods/s; 0: as fast as the API server takes them
	writeConcurrency  int
	wasmgpuArgs       []string
	schedulerQPS      int
	timeout           time.Duration
	scenario          string // scenarioGPUs or scenarioDRA
	draClaims         string // claimsByName or claimsFromTemplate
}

type scale struct{ nodes, pods int }

func (s scale) String() string { return fmt.Sprintf("%dx%d", s.nodes, s.pods) }

// result is one measured run.
type result struct {
	scheduler  string
	scale      scale
	bound      int
	podsPerSec float64
	createRate float64
	median     time.Duration
	p99        time.Duration
	stages     stages
	cpu        cpuSplit
	requests   []requestCount
	peakRSS    int64 // bytes
	wall       time.Duration
	note       string
}

// glibcTunables is what the wasmgpu image sets (Dockerfile): two malloc
// arenas, not one per thread that ever allocated (up to eight per core),
// each kept at its peak.
const glibcTunables = "glibc.malloc.arena_max=2"

func run(args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var c config
	var scales, schedulers, wasmgpuArgs string
	fs.StringVar(&c.controlPlane, "control-plane", "", "the control-plane binary (tests/control-plane/build.sh)")
	fs.StringVar(&c.wasmgpu, "wasmgpu", "target/release/wasmgpu", "the wasmgpu binary")
	fs.StringVar(&c.policy, "policy", "target/wasm32-wasip2/policy/wasmgpu_binpack.wasm", "the binpack policy component")
	fs.StringVar(&c.crds, "crds", "deploy/crds", "the CRDs (a kustomization directory)")
	fs.StringVar(&c.work, "work", ".work/bench-e2e", "where each run's kubeconfig and logs go")
	fs.StringVar(&scales, "scales", "250x1000,1000x5000", "NODESxPODS, comma-separated")
	fs.StringVar(&schedulers, "schedulers", "kube-scheduler,wasmgpu", "which to run, comma-separated")
	fs.IntVar(&c.repeat, "repeat", 1, "runs of each scheduler at each scale")
	fs.IntVar(&c.createConcurrency, "create-concurrency", 64, "pod creations in flight at once")
	fs.Float64Var(&c.createRate, "create-rate", 0, "pods created per second, the same for every scheduler (0: as fast as the API server takes them, which differs with the scheduler beside it)")
	fs.IntVar(&c.writeConcurrency, "write-concurrency", 0, "wasmgpu controller --write-concurrency (0: its default)")
	fs.StringVar(&wasmgpuArgs, "wasmgpu-args", "", "more arguments of wasmgpu controller, space-separated (e.g. \"--allocated-events-per-second 100000\")")
	fs.IntVar(&c.schedulerQPS, "scheduler-qps", 500, "kube-scheduler client QPS and burst")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "the most one run may take to bind its pods")
	fs.StringVar(&c.scenario, "scenario", scenarioGPUs, "gpus: GPUs as nvidia.com/gpu capacity and GPUNodes; dra: as DRA ResourceSlices, each pod asking through a ResourceClaim")
	fs.StringVar(&c.draClaims, "dra-claims", claimsByName, "with --scenario dra: name (a claim per pod, made before the timed creations) or template (one ResourceClaimTemplate; the resourceclaim controller makes each pod's claim)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	c.wasmgpuArgs = strings.Fields(wasmgpuArgs)
	if c.scenario != scenarioGPUs && c.scenario != scenarioDRA {
		fmt.Fprintf(os.Stderr, "bench-e2e run: --scenario: %q is neither %s nor %s\n", c.scenario, scenarioGPUs, scenarioDRA)
		return 2
	}
	if c.draClaims != claimsByName && c.draClaims != claimsFromTemplate {
		fmt.Fprintf(os.Stderr, "bench-e2e run: --dra-claims: %q is neither %s nor %s\n", c.draClaims, claimsByName, claimsFromTemplate)
		return 2
	}
	if c.createRate < 0 {
		fmt.Fprintf(os.Stderr, "bench-e2e run: --create-rate: %g is negative (0 creates as fast as the API server takes them)\n", c.createRate)
		return 2
	}
	if c.controlPlane == "" {
		fmt.Fprintln(os.Stderr, "bench-e2e run: --control-plane is required (tests/control-plane/build.sh prints it)")
		return 2
	}
	for _, s := range strings.Split(scales, ",") {
		var sc scale
		if _, err := fmt.Sscanf(strings.TrimSpace(s), "%dx%d", &sc.nodes, &sc.pods); err != nil || sc.nodes < 1 || sc.pods < 1 {
			fmt.Fprintf(os.Stderr, "bench-e2e run: --scales: %q is not NODESxPODS (e.g. 250x1000)\n", s)
			return 2
		}
		c.scales = append(c.scales, sc)
	}
	for _, s := range strings.Split(schedulers, ",") {
		s = strings.TrimSpace(s)
		if s != "kube-scheduler" && s != "wasmgpu" {
			fmt.Fprintf(os.Stderr, "bench-e2e run: --schedulers: %q is neither kube-scheduler nor wasmgpu\n", s)
			return 2
		}
		c.schedulers = append(c.schedulers, s)
	}
	for _, p := range []*string{&c.controlPlane, &c.wasmgpu, &c.policy, &c.crds, &c.work} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-e2e run:", err)
			return 2
		}
		*p = abs
	}
	if err := os.MkdirAll(c.work, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench-e2e run:", err)
		return 1
	}

	var results []result
	failed := false
	for _, sc := range c.scales {
		for rep := 1; rep <= c.repeat; rep++ {
			for _, sched := range c.schedulers {
				dir := filepath.Join(c.work, fmt.Sprintf("%s-%s-%d", sched, sc, rep))
				if c.scenario == scenarioDRA {
					dir = filepath.Join(c.work, fmt.Sprintf("dra-%s-%s-%s-%d", c.draClaims, sched, sc, rep))
				}
				fmt.Fprintf(os.Stderr, "==> %s, %d nodes x %d GPUs, %d pods, %s (run %d; logs in %s)\n",
					sched, sc.nodes, gpusPerNode, sc.pods, c.describe(), rep, dir)
				r, err := runOne(&c, sched, sc, dir)
				if err != nil {
					fmt.Fprintf(os.Stderr, "    failed: %v\n", err)
					failed = true
					continue
				}
				fmt.Fprintf(os.Stderr, "    %s\n", r.line())
				results = append(results, r)
			}
		}
	}
	fmt.Fprintf(os.Stdout, "\nScenario: %s\n", c.describe())
	printTable(os.Stdout, results)
	if failed {
		return 1
	}
	return 0
}

// describe says how the pods ask for their GPU.
func (c *config) describe() string {
	pace := "; pods created " + c.pace()
	switch {
	case c.scenario == scenarioGPUs:
		return "gpus (nvidia.com/gpu for kube-scheduler, a GPUResource for wasmgpu)" + pace
	case c.draClaims == claimsFromTemplate:
		return "dra (a ResourceClaim per pod, made from a ResourceClaimTemplate by the resourceclaim controller)" + pace
	default:
		return "dra (a ResourceClaim per pod, made by name before the pods)" + pace
	}
}

// pace says how fast the pods are created.
func (c *config) pace() string {
	if c.createRate > 0 {
		return fmt.Sprintf("at %g/s, at most %d in flight", c.createRate, c.createConcurrency)
	}
	return fmt.Sprintf("as fast as the API server takes them, %d in flight", c.createConcurrency)
}

func (r result) line() string {
	s := fmt.Sprintf("bound %d in %s: %.0f pods/s (created at %.0f/s), median %s (POST %s, on the watch after %s, bound %s later), p99 %s, peak RSS %.1f MiB; CPU: control plane %.2f s, %s %.2f s, generator %.2f s; API requests: %s",
		r.bound, r.wall.Round(time.Millisecond), r.podsPerSec, r.createRate, ms(r.median),
		ms(r.stages.post), ms(r.stages.watch), ms(r.stages.bind), ms(r.p99), mib(r.peakRSS),
		r.cpu.controlPlane.Seconds(), r.scheduler, r.cpu.scheduler.Seconds(), r.cpu.generator.Seconds(), formatRequests(r.requests))
	if r.note != "" {
		s += " (" + r.note + ")"
	}
	return s
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
func mib(b int64) float64       { return float64(b) / (1 << 20) }

func printTable(w io.Writer, results []result) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scale (nodes × pods) | scheduler | pods bound | pods/s | created/s | median | p99 | peak RSS |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Fprintf(w, "| %d × %d | %s | %d | %.0f | %.0f | %s | %s | %.1f MiB |\n", r.scale.nodes, r.scale.pods,
			r.scheduler, r.bound, r.podsPerSec, r.createRate, ms(r.median), ms(r.p99), mib(r.peakRSS))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Where a pod's wait goes (medians): POST, from sending it to its answer; on the watch, from sending it to its first appearance on a watch; bound, from that appearance to spec.nodeName seen.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CPU: seconds of CPU each process used from the first POST to the last binding seen (wall: that span).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scale (nodes × pods) | scheduler | POST | on the watch | bound | median latency | wall | CPU: control plane | CPU: scheduler | CPU: generator |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Fprintf(w, "| %d × %d | %s | %s | %s | %s | %s | %.2f s | %.2f s | %.2f s | %.2f s |\n", r.scale.nodes, r.scale.pods, r.scheduler,
			ms(r.stages.post), ms(r.stages.watch), ms(r.stages.bind), ms(r.median), r.wall.Seconds(),
			r.cpu.controlPlane.Seconds(), r.cpu.scheduler.Seconds(), r.cpu.generator.Seconds())
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scale (nodes × pods) | scheduler | API requests from the first POST to the last binding seen (apiserver_request_total) |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, r := range results {
		fmt.Fprintf(w, "| %d × %d | %s | %s |\n", r.scale.nodes, r.scale.pods, r.scheduler, formatRequests(r.requests))
	}
	// Ratios of the runs of each scale, pairing the i-th run of each scheduler.
	type key struct {
		s   scale
		who string
	}
	byKey := map[key][]result{}
	var order []scale
	for _, r := range results {
		k := key{r.scale, r.scheduler}
		if _, seen := byKey[key{r.scale, "kube-scheduler"}]; !seen {
			if _, seen2 := byKey[key{r.scale, "wasmgpu"}]; !seen2 {
				order = append(order, r.scale)
			}
		}
		byKey[k] = append(byKey[k], r)
	}
	header := false
	for _, s := range order {
		ks, ws := byKey[key{s, "kube-scheduler"}], byKey[key{s, "wasmgpu"}]
		for i := 0; i < len(ks) && i < len(ws); i++ {
			if !header {
				fmt.Fprintln(w)
				fmt.Fprintln(w, "| scale | run | throughput wasmgpu / kube-scheduler | median wasmgpu / kube-scheduler | p99 wasmgpu / kube-scheduler | peak RSS wasmgpu / kube-scheduler |")
				fmt.Fprintln(w, "|---|---|---|---|---|---|")
				header = true
			}
			k, x := ks[i], ws[i]
			fmt.Fprintf(w, "| %d × %d | %d | %.2f× | %.2f | %.2f | %.2f |\n", s.nodes, s.pods, i+1,
				x.podsPerSec/k.podsPerSec, float64(x.median)/float64(k.median),
				float64(x.p99)/float64(k.p99), float64(x.peakRSS)/float64(k.peakRSS))
		}
	}
}

// process is a child process, its log and how to stop it.
type process struct {
	cmd  *exec.Cmd
	done chan error
	name string
}

func start(name, logPath string, env []string, stdin *os.File, stdout io.Writer, argv ...string) (*process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = logFile
	cmd.Stdout = logFile
	if stdout != nil {
		cmd.Stdout = io.MultiWriter(logFile, stdout)
	}
	if stdin != nil {
		cmd.Stdin = stdin
	}
	// Its own process group, so that ^C on make reaches it through us only.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, argv[0], err)
	}
	p := &process{cmd: cmd, done: make(chan error, 1), name: name}
	go func() {
		p.done <- cmd.Wait()
		logFile.Close()
	}()
	return p, nil
}

func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// cpuSplit is the CPU time each process used from the first POST to the
// last binding seen: the control plane (API server and etcd), the scheduler
// under test, and this generator with its watch.
type cpuSplit struct{ controlPlane, scheduler, generator time.Duration }

func (a cpuSplit) minus(b cpuSplit) cpuSplit {
	return cpuSplit{a.controlPlane - b.controlPlane, a.scheduler - b.scheduler, a.generator - b.generator}
}

// cpuNow reads the CPU time used so far by the control plane, the scheduler
// and this process.
func cpuNow(controlPlane, scheduler int) (cpuSplit, error) {
	var split cpuSplit
	var err error
	if split.controlPlane, err = cpuTime(controlPlane); err != nil {
		return split, err
	}
	if split.scheduler, err = cpuTime(scheduler); err != nil {
		return split, err
	}
	var self syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &self); err != nil {
		return split, err
	}
	split.generator = time.Duration(self.Utime.Nano() + self.Stime.Nano())
	return split, nil
}

// cpuTime reads utime + stime of a running process (/proc/PID/stat, in
// clock ticks of 1/100 s, USER_HZ on Linux).
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; the fields start after its ')'.
	end := strings.LastIndexByte(string(data), ')')
	fields := strings.Fields(string(data[end+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] { // utime, stime (fields 14 and 15)
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// peakRSS reads VmHWM of a running process, in bytes.
func peakRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

func runOne(c *config, sched string, sc scale, dir string) (res result, err error) {
	res.scheduler, res.scale = sched, sc
	if err := os.RemoveAll(dir); err != nil {
		return res, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	kubeconfig := filepath.Join(dir, "admin.kubeconfig")

	// The API server; it stops when our end of its stdin closes.
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return res, err
	}
	readyR, readyW := io.Pipe()
	cp, err := start("control plane", filepath.Join(dir, "control-plane.log"), nil, stdinR, readyW,
		c.controlPlane, "serve", "--kubeconfig", kubeconfig, "--stop-on-stdin-eof")
	stdinR.Close()
	if err != nil {
		stdinW.Close()
		return res, err
	}
	defer func() {
		stdinW.Close()
		cp.stop()
		readyW.Close()
	}()
	readyLine := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(readyR)
		for scanner.Scan() {
			if strings.HasPrefix(scanner.Text(), readyPrefix) {
				readyLine <- scanner.Text()
			}
		}
	}()
	select {
	case <-readyLine:
	case err := <-cp.done:
		return res, fmt.Errorf("the control plane exited before it was ready (%v); see %s/control-plane.log", err, dir)
	case <-time.After(2 * time.Minute):
		return res, fmt.Errorf("the control plane was not ready within 2 minutes; see %s/control-plane.log", dir)
	}

	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return res, err
	}
	// The generator must not be what limits the rate.
	restConfig.QPS, restConfig.Burst = 5000, 5000
	client := kubernetes.NewForConfigOrDie(restConfig)
	dyn := dynamic.NewForConfigOrDie(restConfig)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	if sched == "wasmgpu" {
		kubectl := filepath.Join(filepath.Dir(c.controlPlane), "kubectl")
		for _, argv := range [][]string{
			{kubectl, "apply", "--server-side", "-k", c.crds},
			{kubectl, "wait", "--for=condition=Established", "--timeout=60s", "crd/gpuresources.wasmgpu.io", "crd/gpunodes.wasmgpu.io"},
		} {
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
			if out, err := cmd.CombinedOutput(); err != nil {
				return res, fmt.Errorf("%s: %v\n%s", strings.Join(argv[1:], " "), err, out)
			}
		}
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return res, fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	started := time.Now()
	dra := c.scenario == scenarioDRA
	if dra {
		if err := createDeviceClass(ctx, client); err != nil {
			return res, err
		}
	}
	if err := parallel(32, sc.nodes, func(i int) error {
		name := fmt.Sprintf("node-%04d", i)
		if err := createNode(ctx, client, dyn, name, !dra, !dra && sched == "wasmgpu"); err != nil {
			return err
		}
		if dra {
			return createSlice(ctx, client, name)
		}
		return nil
	}); err != nil {
		return res, err
	}
	if sched == "wasmgpu" && !dra {
		gr := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "wasmgpu.io/v1alpha1", "kind": "GPUResource",
			"metadata": map[string]any{"name": "one-gpu", "namespace": namespace},
			"spec":     map[string]any{"count": int64(1), "sharing": "Exclusive"},
		}}
		if _, err := dyn.Resource(gpuResources).Namespace(namespace).Create(ctx, gr, metav1.CreateOptions{}); err != nil {
			return res, fmt.Errorf("creating GPUResource one-gpu: %w", err)
		}
	}
	fmt.Fprintf(os.Stderr, "    %d nodes registered in %s\n", sc.nodes, time.Since(started).Round(time.Millisecond))
	// Pod names; with claims by name, each pod's claim is made now, before
	// the scheduler starts and before any timed creation.
	names := make([]string, sc.pods)
	for i := range names {
		names[i] = fmt.Sprintf("pod-%05d", i)
	}
	if dra {
		claimsStarted := time.Now()
		if err := createClaims(ctx, client, c.draClaims, append([]string{"warm-up"}, names...)); err != nil {
			return res, err
		}
		if c.draClaims == claimsByName {
			fmt.Fprintf(os.Stderr, "    %d ResourceClaims created in %s\n", sc.pods+1, time.Since(claimsStarted).Round(time.Millisecond))
		}
	}

	// The scheduler under test.
	var proc *process
	switch sched {
	case "kube-scheduler":
		self, err := os.Executable()
		if err != nil {
			return res, err
		}
		cfgPath := filepath.Join(dir, "kube-scheduler.yaml")
		cfg := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %d
  burst: %d
leaderElection:
  leaderElect: false
`, kubeconfig, c.schedulerQPS, c.schedulerQPS)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			return res, err
		}
		proc, err = start("kube-scheduler", filepath.Join(dir, "kube-scheduler.log"), nil, nil, nil,
			self, "kube-scheduler", "--config", cfgPath, "--secure-port=0", "-v=1")
		if err != nil {
			return res, err
		}
	case "wasmgpu":
		argv := []string{c.wasmgpu, "controller", "--policy", "binpack=" + c.policy,
			"--default-policy", "binpack", "--http-address", "off"}
		if c.writeConcurrency > 0 {
			argv = append(argv, "--write-concurrency", strconv.Itoa(c.writeConcurrency))
		}
		argv = append(argv, c.wasmgpuArgs...)
		// The allocator's arenas as the image sets them (Dockerfile).
		proc, err = start("wasmgpu controller", filepath.Join(dir, "controller.log"),
			[]string{"KUBECONFIG=" + kubeconfig, "GLIBC_TUNABLES=" + glibcTunables}, nil, nil, argv...)
		if err != nil {
			return res, err
		}
	}
	defer proc.stop()

	// Each pod's POST time, and the first time the watch shows it bound.
	var mu sync.Mutex
	posted := map[string]time.Time{}
	bound := map[string]time.Time{}
	var boundCount atomic.Int64
	allBound := make(chan struct{})
	want := int64(sc.pods)
	if capacity := int64(sc.nodes*gpusPerNode - 1); want > capacity {
		want = capacity
		res.note = fmt.Sprintf("%d pods fit; the rest stay pending", capacity)
	}
	seen := map[string]time.Time{}
	answered := map[string]time.Time{}
	onPod := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Name == "warm-up" {
			return
		}
		now := time.Now()
		mu.Lock()
		if _, before := seen[pod.Name]; !before {
			seen[pod.Name] = now
		}
		if pod.Spec.NodeName == "" {
			mu.Unlock()
			return
		}
		_, already := bound[pod.Name]
		if !already {
			bound[pod.Name] = now
		}
		mu.Unlock()
		if !already && boundCount.Add(1) == want {
			close(allBound)
		}
	}
	warmBound := make(chan struct{})
	var warmOnce sync.Once
	watchClient := kubernetes.NewForConfigOrDie(restConfig)
	factory := informers.NewSharedInformerFactoryWithOptions(watchClient, 0, informers.WithNamespace(namespace))
	podInformer := factory.Core().V1().Pods().Informer()
	_, _ = podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok && pod.Name == "warm-up" && pod.Spec.NodeName != "" {
				warmOnce.Do(func() { close(warmBound) })
			}
			onPod(obj)
		},
		UpdateFunc: func(_, obj any) {
			if pod, ok := obj.(*corev1.Pod); ok && pod.Name == "warm-up" && pod.Spec.NodeName != "" {
				warmOnce.Do(func() { close(warmBound) })
			}
			onPod(obj)
		},
	})
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.HasSynced) {
		return res, errors.New("the pod informer did not sync")
	}

	// Warm-up: one pod bound means the scheduler has listed everything.
	if _, err := client.CoreV1().Pods(namespace).Create(ctx, benchPod("warm-up", sched, c), metav1.CreateOptions{}); err != nil {
		return res, fmt.Errorf("creating pod warm-up: %w", err)
	}
	select {
	case <-warmBound:
	case err := <-proc.done:
		return res, fmt.Errorf("%s exited (%v); see %s", proc.name, err, dir)
	case <-time.After(3 * time.Minute):
		return res, fmt.Errorf("%s did not bind the warm-up pod within 3 minutes; see %s", proc.name, dir)
	}
	fmt.Fprintf(os.Stderr, "    %s is up (warm-up pod bound); creating %d pods %s\n", sched, sc.pods, c.pace())

	requestsBefore, err := apiRequests(ctx, client)
	if err != nil {
		return res, err
	}
	cpuBefore, err := cpuNow(cp.cmd.Process.Pid, proc.cmd.Process.Pid)
	if err != nil {
		return res, err
	}
	first := time.Now()
	var lastPost atomic.Int64
	createErr := make(chan error, 1)
	go func() {
		createErr <- parallel(c.createConcurrency, sc.pods, func(i int) error {
			name := names[i]
			pod := benchPod(name, sched, c)
			if c.createRate > 0 {
				time.Sleep(time.Until(first.Add(time.Duration(float64(i) / c.createRate * float64(time.Second)))))
			}
			mu.Lock()
			posted[name] = time.Now()
			mu.Unlock()
			_, err := client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("creating pod %s: %w", name, err)
			}
			mu.Lock()
			answered[name] = time.Now()
			mu.Unlock()
			end := time.Since(first).Nanoseconds()
			for {
				old := lastPost.Load()
				if end <= old || lastPost.CompareAndSwap(old, end) {
					break
				}
			}
			return nil
		})
	}()
	deadline := time.After(c.timeout)
	select {
	case <-allBound:
	case err := <-proc.done:
		return res, fmt.Errorf("%s exited (%v); see %s", proc.name, err, dir)
	case <-deadline:
		return res, fmt.Errorf("only %d of %d pods bound within %s; see %s", boundCount.Load(), want, c.timeout, dir)
	}
	if err := <-createErr; err != nil {
		return res, err
	}
	cpuAfter, err := cpuNow(cp.cmd.Process.Pid, proc.cmd.Process.Pid)
	if err != nil {
		return res, err
	}
	res.cpu = cpuAfter.minus(cpuBefore)
	requestsAfter, err := apiRequests(ctx, client)
	if err != nil {
		return res, err
	}
	res.requests = requestsDuring(requestsBefore, requestsAfter)
	res.peakRSS, err = peakRSS(proc.cmd.Process.Pid)
	if err != nil {
		return res, err
	}
	if dra {
		checked, err := verifyDRA(ctx, client, c.controlPlane, kubeconfig, dir)
		if err != nil {
			return res, err
		}
		fmt.Fprintf(os.Stderr, "    %s\n", checked)
	}

	mu.Lock()
	var latencies, creating, arriving, scheduling []time.Duration
	var last time.Time
	for name, at := range bound {
		latencies = append(latencies, at.Sub(posted[name]))
		creating = append(creating, answered[name].Sub(posted[name]))
		arriving = append(arriving, seen[name].Sub(posted[name]))
		scheduling = append(scheduling, at.Sub(seen[name]))
		if at.After(last) {
			last = at
		}
	}
	mu.Unlock()
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	res.stages = stages{post: median(creating), watch: median(arriving), bind: median(scheduling)}
	res.bound = len(latencies)
	res.wall = last.Sub(first)
	res.podsPerSec = float64(res.bound) / res.wall.Seconds()
	res.createRate = float64(sc.pods) / (time.Duration(lastPost.Load()).Seconds())
	res.median = latencies[len(latencies)/2]
	res.p99 = latencies[int(math.Ceil(0.99*float64(len(latencies))))-1]
	return res, nil
}

// stages splits a pod's wait (medians over the run's pods): post, from the
// POST sent to its answer; watch, from the POST sent to the pod's first
// appearance on a watch (what a scheduler's own watch sees at about the same
// moment); bind, from that appearance to the watch showing spec.nodeName
// (the scheduler's queue, its decision, the binding's POST and the watch
// that reports it).
type stages struct{ post, watch, bind time.Duration }

// median of durations (sorted here).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

// parallel runs f(0..n-1), at most limit at once; the first error wins.
func parallel(limit, n int, f func(int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	for w := 0; w < limit && w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { firstErr = err })
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// createNode registers a Ready node as a kubelet would (status through the
// status subresource), with nvidia.com/gpu capacity as the device plugin
// would advertise it if deviceCapacity, and its GPUNode as an agent would
// publish it if withGPUNode.
func createNode(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, name string, deviceCapacity, withGPUNode bool) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   name,
		Labels: map[string]string{"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"},
	}}
	created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating Node %s: %w", name, err)
	}
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("96"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	if deviceCapacity {
		resources["nvidia.com/gpu"] = resource.MustParse(strconv.Itoa(gpusPerNode))
	}
	now := metav1.Now()
	created.Status = corev1.NodeStatus{
		Capacity:    resources,
		Allocatable: resources,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "benchmark node", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
	}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the status of Node %s: %w", name, err)
	}
	// Admission (TaintNodesByCondition) created it with the not-ready taint,
	// which a node lifecycle controller would remove once it is Ready.
	if _, err := client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType,
		[]byte(`{"spec":{"taints":null}}`), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("removing the not-ready taint of Node %s: %w", name, err)
	}
	if !withGPUNode {
		return nil
	}
	uuids := make([]any, gpusPerNode)
	for i := range uuids {
		uuids[i] = fmt.Sprintf("GPU-%s-%d", name, i)
	}
	gpus := make([]any, gpusPerNode)
	for i := range gpus {
		var peers []any
		for j, u := range uuids {
			if j != i {
				peers = append(peers, u)
			}
		}
		gpus[i] = map[string]any{
			"uuid": uuids[i], "index": int64(i), "model": h100, "memoryTotalMiB": int64(h100MiB),
			"pciBusId": fmt.Sprintf("00000000:%02X:00.0", 0x18+i), "nvlinkPeers": peers, "healthy": true,
		}
	}
	api := dyn.Resource(gpuNodes)
	obj, err := api.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "wasmgpu.io/v1alpha1", "kind": "GPUNode",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{},
	}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating GPUNode %s: %w", name, err)
	}
	obj.Object["status"] = map[string]any{
		"gpus": gpus, "gpusTotal": int64(gpusPerNode), "gpusHealthy": int64(gpusPerNode), "model": h100,
	}
	if _, err := api.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("publishing the status of GPUNode %s: %w", name, err)
	}
	return nil
}

// benchPod is one pod asking for one GPU, the way each scheduler is asked in
// the scenario.
func benchPod(name, sched string, c *config) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "work", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if sched == "wasmgpu" {
		pod.Spec.SchedulerName = "wasmgpu"
	}
	switch {
	case c.scenario == scenarioDRA:
		useClaim(pod, c.draClaims)
	case sched == "kube-scheduler":
		pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	default:
		pod.Annotations = map[string]string{"wasmgpu.io/gpuresource": "one-gpu"}
	}
	return pod
}
