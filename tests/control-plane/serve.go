package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// ReadyPrefix starts the one line written to stdout once the server is ready.
// The rest of the line is "server=URL version=V ready-in=D kubeconfig=PATH";
// the path comes last and runs to the end of the line.
const readyPrefix = "wasmgpu control plane ready:"

// How long a stop may take before the process gives up waiting and exits.
const shutdownTimeout = 20 * time.Second

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, " ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	kubeconfigPath := fs.String("kubeconfig", "",
		"where to write the admin kubeconfig (default: inside the temporary data directory); removed on exit")
	stopOnEOF := fs.Bool("stop-on-stdin-eof", false,
		"also stop when stdin reaches end of file, e.g. when the process that started this one exits")
	readyTimeout := fs.Duration("ready-timeout", 3*time.Minute, "give up when not ready after this long")
	hint := fs.Bool("hint", false, "after the ready line, print how to use the cluster from a shell")
	var extra stringList
	fs.Var(&extra, "apiserver-arg", "an extra kube-apiserver flag, e.g. --apiserver-arg=--v=2 (repeatable)")
	controllers := fs.String("controllers", knownControllers(),
		"kube-controller-manager controllers to run in process, comma-separated; empty: none")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "serve: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := checkControllers(splitList(*controllers)); err != nil {
		fmt.Fprintf(os.Stderr, "serve: --controllers: %v\n", err)
		return 2
	}

	started := time.Now()
	dir, err := os.MkdirTemp("", "wasmgpu-control-plane-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "control-plane: %v\n", err)
		return 1
	}
	if *kubeconfigPath == "" {
		*kubeconfigPath = filepath.Join(dir, "kubeconfig")
	} else if *kubeconfigPath, err = filepath.Abs(*kubeconfigPath); err != nil {
		fmt.Fprintf(os.Stderr, "control-plane: %v\n", err)
		return 1
	}
	cleanup := func() {
		_ = os.Remove(*kubeconfigPath)
		_ = os.RemoveAll(dir)
	}

	stop := make(chan string, 2)
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-signals
		stop <- sig.String()
		<-signals
		fmt.Fprintln(os.Stderr, "control-plane: second signal, exiting at once")
		cleanup()
		os.Exit(1)
	}()
	// When the process that reads our stdout and stderr is gone (a test run
	// that ended), writing a log line must not kill us before the cleanup:
	// with SIGPIPE notified, such writes just fail with EPIPE.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	if *stopOnEOF {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop <- "end of stdin"
		}()
	}

	err = run(runConfig{
		dir:            dir,
		kubeconfigPath: *kubeconfigPath,
		readyTimeout:   *readyTimeout,
		apiserverArgs:  extra,
		started:        started,
		hint:           *hint,
		controllers:    splitList(*controllers),
	}, stop)
	cleanup()
	klog.Flush()
	if err != nil {
		fmt.Fprintf(os.Stderr, "control-plane: %v\n", err)
		return 1
	}
	return 0
}

type runConfig struct {
	dir            string
	kubeconfigPath string
	readyTimeout   time.Duration
	apiserverArgs  []string
	started        time.Time
	hint           bool
	controllers    []string
}

// splitList is a comma-separated flag value as its non-empty parts.
func splitList(value string) []string {
	var parts []string
	for _, part := range strings.Split(value, ",") {
		if part = strings.TrimSpace(part); part != "" {
			parts = append(parts, part)
		}
	}
	return parts
}

// run starts etcd and kube-apiserver, announces readiness, and stops both
// when a reason arrives on stop (or when the apiserver fails).
func run(cfg runConfig, stop <-chan string) error {
	p, err := newPKI(cfg.dir)
	if err != nil {
		return fmt.Errorf("generating certificates: %w", err)
	}

	etcd, etcdURL, err := startEtcd(cfg.dir)
	if err != nil {
		return err
	}
	defer etcd.stop()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	port, apiserverDone, err := startAPIServer(ctx, append(apiserverFlags(p, etcdURL), cfg.apiserverArgs...))
	if err != nil {
		return fmt.Errorf("starting kube-apiserver: %w", err)
	}
	// From here on, the apiserver must be stopped and waited for.
	stopAPIServer := func() error {
		cancel()
		select {
		case err := <-apiserverDone:
			if err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("kube-apiserver stopped with: %w", err)
			}
			return nil
		case <-time.After(shutdownTimeout):
			return fmt.Errorf("kube-apiserver did not stop within %s", shutdownTimeout)
		}
	}

	server := fmt.Sprintf("https://127.0.0.1:%d", port)
	kubeconfig, err := kubeconfigFor(server, p)
	if err != nil {
		return errors.Join(err, stopAPIServer())
	}
	if err := waitReady(ctx, kubeconfig, cfg.readyTimeout, apiserverDone, stop); err != nil {
		return errors.Join(err, stopAPIServer())
	}
	if err := startControllers(ctx, kubeconfig, cfg.controllers); err != nil {
		return errors.Join(err, stopAPIServer())
	}
	if err := writeFileAtomic(cfg.kubeconfigPath, kubeconfig); err != nil {
		return errors.Join(err, stopAPIServer())
	}

	fmt.Printf("%s server=%s version=%s ready-in=%s kubeconfig=%s\n", readyPrefix, server,
		kubernetesVersion(), time.Since(cfg.started).Round(10*time.Millisecond), cfg.kubeconfigPath)
	if cfg.hint {
		printHint(cfg.kubeconfigPath)
	}

	select {
	case reason := <-stop:
		klog.InfoS("Stopping the control plane", "reason", reason)
		return stopAPIServer()
	case err := <-apiserverDone:
		return fmt.Errorf("kube-apiserver stopped on its own: %v", err)
	case err := <-etcd.Err():
		return errors.Join(fmt.Errorf("etcd failed: %w", err), stopAPIServer())
	}
}

// waitReady polls, with the admin identity of the kubeconfig, until /readyz
// passes and the "default" namespace exists.
func waitReady(ctx context.Context, kubeconfig []byte, timeout time.Duration,
	apiserverDone <-chan error, stop <-chan string) error {
	restConfig, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return err
	}
	restConfig.Timeout = 5 * time.Second
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	deadline := time.After(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := "no answer yet"
	for {
		select {
		case err := <-apiserverDone:
			return fmt.Errorf("kube-apiserver exited while starting: %v", err)
		case reason := <-stop:
			return fmt.Errorf("stopped while starting (%s)", reason)
		case <-deadline:
			return fmt.Errorf("not ready after %s (last: %s)", timeout, last)
		case <-tick.C:
		}
		status := 0
		result := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status)
		if status != http.StatusOK {
			last = fmt.Sprintf("/readyz answered %d: %v", status, result.Error())
			continue
		}
		_, err := client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		switch {
		case err == nil:
			return nil
		case apierrors.IsNotFound(err):
			last = `namespace "default" not created yet`
		default:
			last = fmt.Sprintf(`getting namespace "default": %v`, err)
		}
	}
}

// printHint tells a person at a shell how to reach the cluster.
func printHint(kubeconfigPath string) {
	kubectl := "control-plane kubectl"
	if exe, err := os.Executable(); err == nil {
		kubectl = exe + " kubectl"
		if link := filepath.Join(filepath.Dir(exe), "kubectl"); fileExists(link) {
			kubectl = link
		}
	}
	fmt.Printf(`
In another shell:
  export KUBECONFIG=%s
  %s get --raw /version
  %s get namespaces
No kubelet or scheduler runs; of kube-controller-manager, only the controllers
of --controllers (by default the resourceclaim controller, the garbage collector
and the namespace controller): see docs/CONTROL-PLANE.md.
Ctrl-C stops the control plane and deletes its data.
`, kubeconfigPath, kubectl, kubectl)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
