package rollout

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sim plays a rollout against a Zonal: every node deleted becomes done
// after `lag` steps, except those in never. It checks at every step that
// at most one zone and at most batch nodes are in flight.
type sim struct {
	t        *testing.T
	z        *Zonal
	zoneOf   map[string]string
	batch    int
	lag      int
	never    map[string]bool
	skip     map[string]bool
	deleted  map[string]int // node -> step it was deleted at
	order    []string
	maxBatch int
	steps    int
}

func (s *sim) done(n string) bool {
	at, ok := s.deleted[n]
	return ok && !s.never[n] && s.step() >= at+s.lag
}

func (s *sim) step() int { return s.steps }

func (s *sim) run(maxSteps int) bool {
	now := time.Unix(0, 0)
	for i := 0; i < maxSteps; i++ {
		s.steps++
		now = now.Add(time.Second)
		replace, finished := s.z.Next(now, s.done, func(n string) bool { return s.skip[n] })
		for _, n := range replace {
			_, again := s.deleted[n]
			require.False(s.t, again, "node %s deleted twice", n)
			s.deleted[n] = s.step()
			s.order = append(s.order, n)
		}
		inflight := map[string]bool{}
		zones := map[string]bool{}
		for n := range s.deleted {
			if !s.done(n) && !s.skip[n] {
				inflight[n] = true
				zones[zoneName(s.zoneOf[n])] = true
			}
		}
		require.LessOrEqual(s.t, len(inflight), s.batch, "in flight at step %d: %v", i, inflight)
		require.LessOrEqual(s.t, len(zones), 1, "zones in flight at step %d: %v", i, zones)
		s.maxBatch = max(s.maxBatch, len(inflight))
		if finished {
			return true
		}
	}
	return false
}

func zoneName(z string) string {
	if z == "" {
		return NoZone
	}
	return z
}

func newSim(t *testing.T, zoneOf map[string]string, nodes []string, unready map[string]bool, canaries, batch, lag int) *sim {
	return &sim{t: t, z: NewZonal(nodes, zoneOf, unready, canaries, batch), zoneOf: zoneOf, batch: batch, lag: lag,
		never: map[string]bool{}, skip: map[string]bool{}, deleted: map[string]int{}}
}

// three zones of 4 nodes and 2 unlabelled nodes
func fleetOf3Zones() ([]string, map[string]string) {
	zoneOf := map[string]string{}
	var nodes []string
	for i, z := range []string{"zone-c", "zone-a", "zone-b"} {
		for j := 0; j < 4; j++ {
			n := fmt.Sprintf("n-%d%d", i, j)
			nodes = append(nodes, n)
			zoneOf[n] = z
		}
	}
	nodes = append(nodes, "bare-0", "bare-1")
	return nodes, zoneOf
}

func TestZonalOrderAndLimits(t *testing.T) {
	nodes, zoneOf := fleetOf3Zones()
	for _, batch := range []int{1, 2, 3, 10} {
		for _, lag := range []int{0, 1, 3} {
			t.Run(fmt.Sprintf("batch %d lag %d", batch, lag), func(t *testing.T) {
				s := newSim(t, zoneOf, nodes, nil, 1, batch, lag)
				require.True(t, s.run(1000), "finished")
				require.Len(t, s.order, len(nodes), "every node once")
				var zoneOrder []string
				for _, n := range s.order {
					z := zoneName(zoneOf[n])
					if len(zoneOrder) == 0 || zoneOrder[len(zoneOrder)-1] != z {
						zoneOrder = append(zoneOrder, z)
					}
				}
				assert.Equal(t, []string{"zone-a", "zone-b", "zone-c", NoZone}, zoneOrder, "by name, unlabelled last, each zone once")
				assert.Equal(t, []string{"n-10"}, s.z.CanaryNodes())
				assert.Equal(t, "n-10", s.order[0])
				for _, zone := range s.z.Zones {
					assert.True(t, zone.Done, zone.Name)
					assert.Equal(t, zone.Nodes[:1], zone.Canary, zone.Name)
				}
				if batch > 1 && lag > 0 {
					assert.Equal(t, min(batch, 3), s.maxBatch, "batches are used up to their size (a zone has 3 nodes after its canary)")
				}
			})
		}
	}
}

// A zone's canary alone first: nothing else of the zone is deleted before
// it is done.
func TestZonalCanaryAloneFirst(t *testing.T) {
	nodes, zoneOf := fleetOf3Zones()
	s := newSim(t, zoneOf, nodes, nil, 1, 4, 2)
	require.True(t, s.run(1000))
	for _, zone := range s.z.Zones {
		canaryDone := s.deleted[zone.Canary[0]] + s.lag
		for _, n := range zone.Nodes[1:] {
			assert.GreaterOrEqual(t, s.deleted[n], canaryDone, "zone %s: %s deleted before its canary was done", zone.Name, n)
		}
	}
}

// The canary zone is the first with a node Ready before the restart; a
// zone with no healthy node has no canary.
func TestZonalCanaryZone(t *testing.T) {
	nodes, zoneOf := fleetOf3Zones()
	unready := map[string]bool{"n-10": true, "n-11": true, "n-12": true, "n-13": true}
	z := NewZonal(nodes, zoneOf, unready, 2, 5)
	var names []string
	for _, zone := range z.Zones {
		names = append(names, zone.Name)
	}
	assert.Equal(t, []string{"zone-b", "zone-a", "zone-c", NoZone}, names)
	assert.Equal(t, []string{"n-20", "n-21"}, z.CanaryNodes())
	assert.Empty(t, z.Zones[1].Canary, "zone-a had no Ready node")

	// canaries never exceed the batch size
	z = NewZonal(nodes, zoneOf, nil, 3, 2)
	assert.Len(t, z.CanaryNodes(), 2)
}

// A canary that never gets done: nothing outside its zone is ever touched,
// and nothing else of its zone either.
func TestZonalFailedCanaryStopsTheRun(t *testing.T) {
	nodes, zoneOf := fleetOf3Zones()
	s := newSim(t, zoneOf, nodes, nil, 1, 3, 1)
	s.never["n-10"] = true
	assert.False(t, s.run(200), "never finishes")
	assert.Equal(t, []string{"n-10"}, s.order)
	assert.False(t, s.z.Zones[0].Done)
	assert.Greater(t, s.z.Zones[0].Duration, 0.0, "how long the failed zone ran")

	// a later node of the second zone: the third zone is never started
	s = newSim(t, zoneOf, nodes, nil, 1, 3, 1)
	s.never["n-22"] = true
	assert.False(t, s.run(200))
	for _, n := range s.order {
		assert.Contains(t, []string{"zone-a", "zone-b"}, zoneOf[n], "node %s of a later zone touched", n)
	}
}

// Nodes that go away during the rollout neither hold their zone nor count
// against the batch.
func TestZonalSkippedNodes(t *testing.T) {
	nodes, zoneOf := fleetOf3Zones()
	s := newSim(t, zoneOf, nodes, nil, 1, 2, 1)
	s.never["n-11"], s.skip["n-11"] = true, true
	s.never["bare-1"] = true
	s.skip["bare-1"] = true
	require.True(t, s.run(1000))
	assert.NotContains(t, s.order, "bare-1", "skipped before its turn: never deleted")
}

func TestZonalNoNodes(t *testing.T) {
	z := NewZonal(nil, nil, nil, 1, 1)
	replace, finished := z.Next(time.Now(), func(string) bool { return true }, func(string) bool { return false })
	assert.Empty(t, replace)
	assert.True(t, finished)
	assert.Empty(t, z.CanaryNodes())
}

// The canary without zones is one zone: its canary nodes first, as many
// as asked even beyond the batch, but never more than the batch in flight.
func TestOneZoneCanaryLargerThanTheBatch(t *testing.T) {
	nodes := []string{"n-0", "n-1", "n-2", "n-3", "n-4", "n-5"}
	z := OneZone(nodes, map[string]bool{"n-1": true}, 3, 1)
	s := &sim{t: t, z: z, zoneOf: map[string]string{}, batch: 1, lag: 1,
		never: map[string]bool{}, skip: map[string]bool{}, deleted: map[string]int{}}
	require.True(t, s.run(1000), "finished")
	assert.Equal(t, []string{"n-0", "n-2", "n-3"}, z.CanaryNodes(), "the first nodes Ready before the restart")
	assert.Equal(t, []string{"n-0", "n-2", "n-3", "n-1", "n-4", "n-5"}, s.order, "the canary first, then the rest in order")
	assert.Equal(t, 1, s.maxBatch)
	assert.True(t, z.Zones[0].Done)
}

// The call of Next that finds the run's canary done names no other node:
// the caller sees the fleet as the canary left it before anything else
// is deleted.
func TestCanaryPassedBeforeAnyOtherNode(t *testing.T) {
	nodes, zoneOf := fleetOf3Zones()
	now := time.Unix(0, 0)
	noSkip := func(string) bool { return false }
	for name, z := range map[string]*Zonal{"zonal": NewZonal(nodes, zoneOf, nil, 1, 3), "one zone": OneZone(nodes, nil, 2, 3)} {
		t.Run(name, func(t *testing.T) {
			done := map[string]bool{}
			isDone := func(n string) bool { return done[n] }
			replace, _ := z.Next(now, isDone, noSkip)
			assert.Equal(t, z.CanaryNodes(), replace)
			assert.False(t, z.CanaryPassed())
			replace, _ = z.Next(now, isDone, noSkip)
			assert.Empty(t, replace, "the canary is not done yet")
			for _, n := range z.CanaryNodes() {
				done[n] = true
			}
			replace, finished := z.Next(now, isDone, noSkip)
			assert.Empty(t, replace, "nothing else in the call that finds the canary done")
			assert.False(t, finished)
			assert.True(t, z.CanaryPassed())
			replace, _ = z.Next(now, isDone, noSkip)
			assert.Len(t, replace, 3, "then the rest, a batch at a time")
		})
	}
}
