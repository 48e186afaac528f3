package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
)

// countedResources are the resources whose apiserver_request_total the
// bench adds up: everything kube-proxy-sync touches. On an idle cluster
// nothing else requests them (controllers watch, they do not poll), so a
// delta over one run is that run's requests. The scrape of /metrics itself
// is a non-resource request and is not counted.
var countedResources = map[string]bool{"configmaps": true, "daemonsets": true, "events": true}

// requestCounts scrapes the API server's apiserver_request_total and sums
// it per "VERB resource[/subresource]" for the counted resources.
func (b *bench) requestCounts(ctx context.Context) (map[string]float64, error) {
	raw, err := b.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scrape the API server's /metrics: %w", err)
	}
	return parseRequestTotals(raw)
}

func parseRequestTotals(raw []byte) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		end := strings.LastIndex(rest, "}")
		if end < 0 {
			continue
		}
		labels := parseLabels(rest[:end])
		if !countedResources[labels["resource"]] {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest[end+1:]), 64)
		if err != nil {
			return nil, fmt.Errorf("parse metric line %q: %w", line, err)
		}
		key := labels["verb"] + " " + labels["resource"]
		if labels["subresource"] != "" {
			key += "/" + labels["subresource"]
		}
		out[key] += v
	}
	return out, sc.Err()
}

// parseLabels reads name="value",... (Prometheus text format, values may
// hold escaped quotes).
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			break
		}
		name := strings.TrimLeft(s[:eq], ", ")
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
			}
			val.WriteByte(s[i])
		}
		out[name] = val.String()
		if i+1 >= len(s) {
			break
		}
		s = s[i+1:]
	}
	return out
}

// requestDelta is after-before, per key and in total.
func requestDelta(before, after map[string]float64) (int64, map[string]int64) {
	per := map[string]int64{}
	var total int64
	for k, v := range after {
		if d := int64(v - before[k]); d != 0 {
			per[k] = d
			total += d
		}
	}
	return total, per
}
