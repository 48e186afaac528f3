package kpsync

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/clock"
)

// proberFunc answers /healthz for a node.
type proberFunc func(node string) (verify.Health, error)

func (f proberFunc) Healthz(_ context.Context, node string) (verify.Health, error) { return f(node) }

// Nodes that finished are checked before the rollout goes on; one whose
// kube-proxy never syncs after the restart stops it, though its pod is Ready.
func TestCheckDoneStopsOnAFailingNode(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	restart := time.Now()
	asked := map[string]int{}
	var mu sync.Mutex
	prober := proberFunc(func(node string) (verify.Health, error) {
		mu.Lock()
		defer mu.Unlock()
		asked[node]++
		now := time.Now()
		switch {
		case node == "kwok-0":
			return verify.Health{}, fmt.Errorf("HTTP 400 from the API server, not kube-proxy's answer: address not allowed")
		case asked[node] == 1: // the baseline
			return verify.Health{Code: 200, PerFamily: true, LastSync: restart.Add(-time.Minute), CurrentTime: now}, nil
		case node == "b": // Ready, but no sync since its restart
			return verify.Health{Code: 200, PerFamily: true, LastSync: restart.Add(-time.Minute), CurrentTime: now}, nil
		}
		return verify.Health{Code: 200, PerFamily: true, LastSync: now, CurrentTime: now}, nil
	})
	o := ConnectivityOptions{Health: verify.Auto, HealthTimeout: 30 * time.Millisecond}
	e := &env{
		o: Options{Connectivity: o},
		d: Deps{Log: logrus.NewEntry(log), Clock: clock.RealClock{}, NodeProxy: func(port int) (verify.Prober, error) {
			assert.Equal(t, 10256, port)
			return prober, nil
		}},
		warns: &warnings{log: logrus.NewEntry(log)},
	}
	fleet := newDoneFleet(t, "a", "b", "c", "kwok-0")
	conn, err := baseline(context.Background(), e, o, fleet.Live(), 10256)
	require.NoError(t, err)
	conn.markRestart(restart)

	rl := &rolling{e: e, fleet: fleet, conn: conn}
	err = rl.checkDone(context.Background())
	require.Error(t, err)
	assert.True(t, verify.IsFailure(err))
	assert.Contains(t, err.Error(), "node b")
	assert.Equal(t, 0, asked["c"]-1, "checked in name order: c waits behind the failed b")
	assert.Equal(t, 1, asked["kwok-0"], "unreachable before: asked once, never after")
	r := rl.out.connectivity
	require.NotNil(t, r)
	assert.Equal(t, 2, r.Checked)
	assert.Equal(t, 1, r.Passed)
	assert.Equal(t, "kwok-0", r.Unreachable[0].Node)
}
