//go:build !testhooks

package app

import (
	"context"
	"io"
)

// testPause has no hook in a release build: TestPauseEnv is not read.
func testPause(io.Writer) func(context.Context, string) { return nil }
