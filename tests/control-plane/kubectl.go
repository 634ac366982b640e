package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

// runKubectl is the main of k8s.io/kubernetes/cmd/kubectl, with args given
// without the program name.
func runKubectl(args []string) int {
	os.Args = append([]string{"kubectl"}, args...)
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) //nolint:errcheck // as upstream does
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err) // prints the error and exits non-zero
	}
	return 0
}
