package main

import "k8s.io/component-base/version"

// kubernetesVersion is the version set at build time through -ldflags -X on
// k8s.io/component-base/version (see build.sh).
func kubernetesVersion() string {
	return version.Get().GitVersion
}
