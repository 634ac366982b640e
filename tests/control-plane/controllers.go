package main

// kube-controller-manager's part the tests and the demo depend on, run in
// process once the API server is ready, the same code from k8s.io/kubernetes,
// wired as kube-controller-manager wires it (cmd/kube-controller-manager/app):
//
//	resourceclaim     resourceclaim.go  claims from templates, released and deleted with their pods
//	garbagecollector  gc.go             ownerReferences: dependents of deleted owners deleted
//	namespace         namespace.go      a deleted namespace emptied, then removed
//
// The controllers share one typed informer factory (and the garbage collector a
// metadata one for the rest), started once every controller has asked for its
// informers; informersStarted is closed then, as kube-controller-manager does.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/controller-manager/pkg/informerfactory"
)

// starter starts one controller; it stops with the context.
type starter struct {
	name  string
	start func(context.Context, *controllerContext) error
}

// starters are the controllers --controllers may name, in the order they start.
var starters = []starter{
	{"resourceclaim", startResourceClaimController},
	{"garbagecollector", startGarbageCollector},
	{"namespace", startNamespaceController},
}

// knownControllers are the names --controllers accepts, comma-separated; all
// of them run by default.
func knownControllers() string {
	names := make([]string, len(starters))
	for i, s := range starters {
		names[i] = s.name
	}
	return strings.Join(names, ",")
}

// controllerContext is what the controllers share.
type controllerContext struct {
	base              *rest.Config
	informers         informers.SharedInformerFactory
	metadataInformers metadatainformer.SharedInformerFactory
	// informersStarted is closed once the factories are started.
	informersStarted chan struct{}
}

// config is the admin identity with kube-controller-manager's client
// settings (--kube-api-qps 20, --kube-api-burst 30) and a user agent naming
// the controller; field managers read "kube-controller-manager", as in a cluster.
func (c *controllerContext) config(name string) *rest.Config {
	config := rest.CopyConfig(c.base)
	config.UserAgent = "kube-controller-manager/" + name + " (wasmgpu control plane)"
	return config
}

// discoveryConfig is config for a discovery client: many requests, seldom.
func (c *controllerContext) discoveryConfig(name string) *rest.Config {
	config := c.config(name)
	config.QPS, config.Burst = 20, 200
	return config
}

// objectOrMetadataInformers gives typed informers where the typed factory
// has them and metadata-only informers for every other resource.
func (c *controllerContext) objectOrMetadataInformers() informerfactory.InformerFactory {
	return informerfactory.NewInformerFactory(c.informers, c.metadataInformers)
}

// checkControllers fails on a name --controllers does not know.
func checkControllers(names []string) error {
	for _, name := range names {
		if !slices.ContainsFunc(starters, func(s starter) bool { return s.name == name }) {
			return fmt.Errorf("unknown controller %q (known: %s)", name, knownControllers())
		}
	}
	return nil
}

// startControllers starts the named controllers (checked by
// checkControllers); they stop with ctx.
func startControllers(ctx context.Context, kubeconfig []byte, names []string) error {
	if len(names) == 0 {
		return nil
	}
	base, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return err
	}
	base.QPS, base.Burst = 20, 30
	c := &controllerContext{base: base, informersStarted: make(chan struct{})}
	client, err := kubernetes.NewForConfig(c.config("shared-informers"))
	if err != nil {
		return err
	}
	metadataClient, err := metadata.NewForConfig(c.config("metadata-informers"))
	if err != nil {
		return err
	}
	c.informers = informers.NewSharedInformerFactory(client, 0)
	c.metadataInformers = metadatainformer.NewSharedInformerFactory(metadataClient, 0)
	for _, s := range starters {
		if !slices.Contains(names, s.name) {
			continue
		}
		if err := s.start(ctx, c); err != nil {
			return fmt.Errorf("starting the %s controller: %w", s.name, err)
		}
	}
	c.informers.Start(ctx.Done())
	c.metadataInformers.Start(ctx.Done())
	close(c.informersStarted)
	return nil
}
