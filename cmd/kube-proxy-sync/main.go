// Command kube-proxy-sync keeps kube-proxy's configuration in sync and
// restarts it only when it must. See internal/app.
package main

import (
	"os"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/app"
)

func main() { os.Exit(app.Main()) }
