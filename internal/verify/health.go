// Package verify checks that kube-proxy on a node really works after its
// restart, beyond its pod being Ready: kube-proxy's own /healthz through the
// API server's node proxy (a sync completed since the restart), and
// optionally a real TCP connection to a Service's ClusterIP from the node.
package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Health is what kube-proxy's /healthz answered.
type Health struct {
	// Code is kube-proxy's HTTP status: 200 healthy, 503 not (stale
	// rules, or from 1.28 on a node being deleted).
	Code int
	// LastSync is the oldest of the per-IP-family sync times (kube-proxy
	// >= 1.33 reports them in "status"); zero when kube-proxy reports none:
	// it has not synced yet, or is older and says only "lastUpdated", which
	// it sets to its current time whenever it is healthy.
	LastSync time.Time
	// NewestSync is the newest of them: a family whose rules did not
	// change (IPv6 on an IPv4 cluster) may not sync again for minutes, the
	// other does on every change of its Services.
	NewestSync time.Time
	// PerFamily: the answer is of a kube-proxy that reports per-family
	// sync times (>= 1.33), whether or not it has synced yet.
	PerFamily bool
	// CurrentTime is the node's clock when it answered.
	CurrentTime time.Time
	// NodeEligible is kube-proxy's view of its node (>= 1.28): false on a
	// node being deleted. Nil when not reported.
	NodeEligible *bool
}

// Prober asks kube-proxy's /healthz on one node.
type Prober interface {
	// Healthz returns what kube-proxy answered, or an error when the
	// request did not reach it (the API server would not or could not proxy).
	Healthz(ctx context.Context, node string) (Health, error)
}

// ParseHealthz reads kube-proxy's answer. A body that is not kube-proxy's
// (the API server's own error, e.g. it will not proxy to a loopback
// address, or nothing listens on the port) is an error.
func ParseHealthz(code int, body []byte) (Health, error) {
	var h healthz
	if err := json.Unmarshal(body, &h); err != nil || h.CurrentTime.IsZero() {
		msg := strings.TrimSpace(string(body))
		var st struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(body, &st) == nil && st.Message != "" {
			msg = st.Message
		}
		if len(msg) > 300 {
			msg = msg[:300] + "..."
		}
		return Health{}, &NotKubeProxyError{Code: code, Msg: msg}
	}
	out := Health{Code: code, CurrentTime: h.CurrentTime, NodeEligible: h.NodeEligible, PerFamily: h.Healthy != nil}
	for _, s := range h.Status {
		if out.LastSync.IsZero() || s.LastUpdated.Before(out.LastSync) {
			out.LastSync = s.LastUpdated
		}
		if s.LastUpdated.After(out.NewestSync) {
			out.NewestSync = s.LastUpdated
		}
	}
	return out, nil
}

// NotKubeProxyError is an answer that did not come from kube-proxy: the
// API server's own, because it would not or could not proxy the request.
type NotKubeProxyError struct {
	Code int
	Msg  string
}

func (e *NotKubeProxyError) Error() string {
	return fmt.Sprintf("HTTP %d from the API server, not kube-proxy's answer: %s", e.Code, e.Msg)
}

// notListeningYet reports whether err is the API server failing to reach
// kube-proxy (a 5xx of its own: connection refused while a kube-proxy that
// just started opens its health port), which is worth asking again; a
// refusal (401, 403) or a wrong address (404) is not.
func notListeningYet(err error) bool {
	var e *NotKubeProxyError
	return errors.As(err, &e) && e.Code >= 500
}

// SyncedSince reports whether the answer proves a sync by kube-proxy after
// since (a time on the checking host's clock), judging the node's clock by
// its currentTime against local, the local time the answer arrived. For a
// kube-proxy older than 1.33 a healthy answer is all there is.
func (h Health) SyncedSince(since, local time.Time) bool {
	if h.Code != http.StatusOK {
		return false
	}
	if !h.PerFamily {
		return true
	}
	skew := h.CurrentTime.Sub(local)
	return h.LastSync.After(since.Add(skew))
}

// SyncedAnyFamilySince reports whether kube-proxy answered healthy and one
// of its IP families synced after since (the local clock; see SyncedSince);
// one that reports no per-family sync time (before 1.33) cannot say: true.
func (h Health) SyncedAnyFamilySince(since, local time.Time) bool {
	if h.Code != http.StatusOK {
		return false
	}
	if !h.PerFamily {
		return true
	}
	return h.NewestSync.After(since.Add(h.CurrentTime.Sub(local)))
}

// String is a short description for messages.
func (h Health) String() string {
	s := fmt.Sprintf("HTTP %d", h.Code)
	switch {
	case h.PerFamily && h.LastSync.IsZero():
		s += ", no sync since kube-proxy started"
	case h.PerFamily:
		s += fmt.Sprintf(", last sync %s", h.LastSync.UTC().Format(time.RFC3339))
	case h.Code == http.StatusOK:
		s += ", no per-family sync time (kube-proxy < 1.33)"
	}
	if h.NodeEligible != nil {
		s += fmt.Sprintf(", nodeEligible %t", *h.NodeEligible)
	}
	return s
}
