// Command control-plane runs a local Kubernetes control plane for wasmgpu's
// tests and demo: an embedded etcd and kube-apiserver in one process. The same
// binary is also kubectl, built from the same Kubernetes modules.
//
//	control-plane serve --kubeconfig PATH   start; one line on stdout once ready
//	control-plane kubectl ARGS...           kubectl (also when run through a link named kubectl)
//	control-plane dra-check --kubeconfig PATH upstream's check of every allocated ResourceClaim
//	control-plane kubelet-dra --kubeconfig PATH --node NODE --pod NS/NAME...
//	                                        the kubelet's DRA manager prepares the pods' claims
//	control-plane version                   the Kubernetes version it was built from
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	if strings.HasPrefix(filepath.Base(os.Args[0]), "kubectl") {
		os.Exit(runKubectl(os.Args[1:]))
	}
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		os.Exit(serve(os.Args[2:]))
	case "kubectl":
		os.Exit(runKubectl(os.Args[2:]))
	case "dra-check":
		os.Exit(draCheck(os.Args[2:]))
	case "kubelet-dra":
		os.Exit(kubeletDRA(os.Args[2:]))
	case "version", "--version":
		fmt.Println(kubernetesVersion())
	case "help", "-h", "--help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "control-plane: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  control-plane serve [--kubeconfig PATH] [--stop-on-stdin-eof] [--controllers=resourceclaim,garbagecollector,namespace] [--apiserver-arg=--flag=value ...]
  control-plane dra-check [--kubeconfig PATH] [--namespace NS]   upstream's check of every allocated ResourceClaim
  control-plane kubelet-dra [--kubeconfig PATH] --node NODE --pod NS/NAME [--pod NS/NAME ...]
                                  the kubelet's DRA manager prepares the pods' claims (stub gpu.nvidia.com plugin)
  control-plane kubectl ARGS...   (or run it through a link named kubectl)
  control-plane version
Run "control-plane serve -h" for the options of serve.
`)
}
