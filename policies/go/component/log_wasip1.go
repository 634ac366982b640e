//go:build wasip1

package component

import (
	"wit_component/sdk"
	"wit_component/wit_world"
)

// In the component, Log lines go to the world's log import (natively there
// is no such import: the SDK's default sink drops them).
func init() { sdk.SetLogSink(wit_world.Log) }
