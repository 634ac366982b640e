package main

import (
	"context"
	"fmt"
	"net"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/rest"
	cliflag "k8s.io/component-base/cli/flag"
	basecompatibility "k8s.io/component-base/compatibility"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// serviceAccountIssuer is the "iss" of the service account tokens this
// control plane mints (TokenRequest API).
const serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// apiserverFlags are the kube-apiserver flags of the local control plane.
// Extra flags given on the command line come after them and win.
func apiserverFlags(p *pki, etcdURL string) []string {
	return []string{
		"--etcd-servers=" + etcdURL,
		"--advertise-address=127.0.0.1",
		// The "kubernetes" Service would point at a loopback address: leave
		// its endpoints alone, as the apiserver's own integration tests do.
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--tls-cert-file=" + p.servingCertFile,
		"--tls-private-key-file=" + p.servingKeyFile,
		"--client-ca-file=" + p.caCertFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=" + serviceAccountIssuer,
		"--service-account-key-file=" + p.saPubFile,
		"--service-account-signing-key-file=" + p.saKeyFile,
		// No controller-manager creates the "default" ServiceAccount of a
		// namespace, which this admission plugin would demand of every pod.
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true",
		"--profiling=false",
	}
}

// startAPIServer runs kube-apiserver in this process on a loopback listener
// it opens itself, so no other process can take the port in between. The
// returned channel yields the server's result once it stops (ctx cancelled or
// a failure).
func startAPIServer(ctx context.Context, args []string) (port int, done <-chan error, err error) {
	s := options.NewServerRunOptions()
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	for _, f := range s.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return 0, nil, fmt.Errorf("kube-apiserver flags: %w", err)
	}

	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, nil, fmt.Errorf("listening on loopback: %w", err)
	}
	port = listener.Addr().(*net.TCPAddr).Port
	s.SecureServing.Listener = listener
	s.SecureServing.BindPort = port

	// What the kube-apiserver command does before Run.
	registry := s.GenericServerRunOptions.ComponentGlobalsRegistry
	if err := registry.Set(); err != nil {
		listener.Close()
		return 0, nil, err
	}
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	featureGate := registry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if err := logsapi.ValidateAndApply(s.Logs, featureGate); err != nil {
		listener.Close()
		return 0, nil, err
	}
	completed, err := s.Complete(ctx)
	if err != nil {
		listener.Close()
		return 0, nil, err
	}
	if errs := completed.Validate(); len(errs) != 0 {
		listener.Close()
		return 0, nil, utilerrors.NewAggregate(errs)
	}

	result := make(chan error, 1)
	go func() { result <- app.Run(ctx, completed) }()
	return port, result, nil
}
