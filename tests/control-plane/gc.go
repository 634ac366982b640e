package main

// The garbage collector deletes an object once every owner its
// ownerReferences name is gone (background deletion), deletes an owner's
// dependents before the owner when the owner carries the foregroundDeletion
// finalizer (foreground), and takes the references off the dependents when it
// carries the orphan finalizer. It watches every resource discovery lists,
// through metadata-only informers where no typed one is shared; every
// gcSyncPeriod it asks discovery again, so resources of CRDs made later are
// watched from then on.

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	cacheddiscovery "k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/restmapper"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
)

const (
	// kube-controller-manager's defaults: --concurrent-gc-syncs and the
	// period of its discovery resync (also how long the first start waits
	// for the informers before collecting anyway).
	gcWorkers    = 20
	gcSyncPeriod = 30 * time.Second
)

func startGarbageCollector(ctx context.Context, c *controllerContext) error {
	const name = "generic-garbage-collector"
	// Kinds of resources are looked up through cached discovery, forgotten
	// every gcSyncPeriod; Sync uses a discovery client of its own.
	mapperDiscovery, err := discovery.NewDiscoveryClientForConfig(c.discoveryConfig("controller-discovery"))
	if err != nil {
		return err
	}
	restMapper := restmapper.NewDeferredDiscoveryRESTMapper(cacheddiscovery.NewMemCacheClient(mapperDiscovery))
	go wait.Until(restMapper.Reset, gcSyncPeriod, ctx.Done())
	syncDiscovery, err := discovery.NewDiscoveryClientForConfig(c.discoveryConfig(name))
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(c.config(name))
	if err != nil {
		return err
	}
	// Each deletion takes two calls: twice the rate, as kube-controller-manager allows.
	config := c.config(name)
	config.QPS *= 2
	metadataClient, err := metadata.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithName("garbage-collector-controller"))
	gc, err := garbagecollector.NewGarbageCollector(ctx, client, metadataClient, restMapper,
		garbagecollector.DefaultIgnoredResources(), c.objectOrMetadataInformers(), c.informersStarted)
	if err != nil {
		return err
	}
	go gc.Run(ctx, gcWorkers, gcSyncPeriod)
	go gc.Sync(ctx, syncDiscovery, gcSyncPeriod)
	return nil
}
