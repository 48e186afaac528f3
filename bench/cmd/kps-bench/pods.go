package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
)

// podWatch follows the DaemonSet's pods with an informer and keeps, from the
// moment it has synced, how many nodes had no Ready pod at the same time:
// unavailable = expected - nodes with a Ready, not terminating pod.
type podWatch struct {
	mu       sync.Mutex
	expected int
	synced   bool
	initial  map[types.UID]bool
	pods     map[types.UID]podState
	// readyOn counts Ready, not terminating pods per node.
	readyOn    map[string]int
	peak       int
	created    int
	deleted    int
	unavailAt0 int
	changed    chan struct{}
	stop       context.CancelFunc
	done       chan struct{}
}

type podState struct {
	node  string
	ready bool
}

// podReport is what a watch saw.
type podReport struct {
	// Expected is the DaemonSet's desiredNumberScheduled when the watch began.
	Expected int `json:"expected"`
	// UnavailableAtStart should be 0: the bench starts from a settled DaemonSet.
	UnavailableAtStart int `json:"unavailable_at_start"`
	// PeakUnavailable is the most nodes without a Ready kube-proxy pod at once.
	PeakUnavailable int `json:"peak_unavailable"`
	// Replaced is how many of the pods present at the start are gone.
	Replaced int `json:"replaced"`
	Created  int `json:"pods_created"`
	Deleted  int `json:"pods_deleted"`
}

func podReadyState(p *corev1.Pod) podState {
	st := podState{node: p.Spec.NodeName}
	if p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
		return st
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			st.ready = true
		}
	}
	return st
}

// watchPods starts an informer on the pods of each DaemonSet named (the
// phase's --name when none), all feeding one watch, and returns once every
// one has synced. Expected is the sum of their desiredNumberScheduled.
func (b *bench) watchPods(ctx context.Context, daemonSets ...string) (*podWatch, error) {
	if len(daemonSets) == 0 {
		daemonSets = []string{b.Name}
	}
	w := &podWatch{
		initial: map[types.UID]bool{}, pods: map[types.UID]podState{}, readyOn: map[string]int{},
		changed: make(chan struct{}, 1), done: make(chan struct{}),
	}
	wctx, cancel := context.WithCancel(ctx)
	w.stop = cancel
	var running sync.WaitGroup
	go func() {
		<-wctx.Done()
		running.Wait()
		close(w.done)
	}()
	var synced []cache.InformerSynced
	for _, name := range daemonSets {
		ds, err := b.cs.AppsV1().DaemonSets(b.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			cancel()
			return nil, fmt.Errorf("get daemonset %s/%s: %w", b.Namespace, name, err)
		}
		w.expected += int(ds.Status.DesiredNumberScheduled)
		inf, err := w.informer(b.cs.CoreV1().Pods(b.Namespace), metav1.FormatLabelSelector(ds.Spec.Selector))
		if err != nil {
			cancel()
			return nil, err
		}
		running.Add(1)
		go func() {
			defer running.Done()
			inf.RunWithContext(wctx)
		}()
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(wctx.Done(), synced...) {
		cancel()
		return nil, fmt.Errorf("pod watch on the pods of daemonsets %s/%s did not sync", b.Namespace, strings.Join(daemonSets, ","))
	}
	w.mu.Lock()
	w.synced = true
	w.unavailAt0 = w.unavailableLocked()
	w.peak = w.unavailAt0
	w.mu.Unlock()
	return w, nil
}

// informer is a pod informer on sel feeding w.
func (w *podWatch) informer(pods corev1client.PodInterface, sel string) (cache.SharedIndexInformer, error) {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return pods.Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if p, ok := obj.(*corev1.Pod); ok {
				w.set(p, initial)
			}
		},
		UpdateFunc: func(_, obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				w.set(p, false)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				w.remove(p.UID)
			}
		},
	})
	return inf, err
}

func (w *podWatch) set(p *corev1.Pod, initial bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old, had := w.pods[p.UID]
	if had && old.ready {
		w.readyOn[old.node]--
	}
	st := podReadyState(p)
	w.pods[p.UID] = st
	if st.ready {
		w.readyOn[st.node]++
	}
	if initial {
		w.initial[p.UID] = true
	} else if !had && w.synced {
		w.created++
	}
	w.note()
}

func (w *podWatch) remove(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, had := w.pods[uid]; had {
		if old.ready {
			w.readyOn[old.node]--
		}
		delete(w.pods, uid)
		if w.synced {
			w.deleted++
		}
	}
	w.note()
}

// note updates the peak and wakes waiters; w.mu is held.
func (w *podWatch) note() {
	if w.synced {
		if u := w.unavailableLocked(); u > w.peak {
			w.peak = u
		}
	}
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *podWatch) unavailableLocked() int {
	ready := 0
	for _, n := range w.readyOn {
		if n > 0 {
			ready++
		}
	}
	if u := w.expected - ready; u > 0 {
		return u
	}
	return 0
}

// settledLocked: one Ready pod per expected node, nothing terminating, and
// (if replaced) none of the initial pods left.
func (w *podWatch) settledLocked(wantReplaced bool) bool {
	if len(w.pods) != w.expected || w.unavailableLocked() != 0 {
		return false
	}
	for uid, st := range w.pods {
		if !st.ready || (wantReplaced && w.initial[uid]) {
			return false
		}
	}
	return true
}

// waitSettled waits for settledLocked, driven by the watch's events.
func (w *podWatch) waitSettled(ctx context.Context, timeout time.Duration, wantReplaced bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		w.mu.Lock()
		ok := w.settledLocked(wantReplaced)
		n, u := len(w.pods), w.unavailableLocked()
		w.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-w.changed:
		case <-ctx.Done():
			return fmt.Errorf("pods did not settle within %s: %d pods, %d of %d nodes without a Ready pod", timeout, n, u, w.expected)
		}
	}
}

// waitGone waits until the watch sees no pod at all: the DaemonSets
// deleted, their pods gone.
func (w *podWatch) waitGone(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		w.mu.Lock()
		n := len(w.pods)
		w.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-w.changed:
		case <-ctx.Done():
			return fmt.Errorf("pods not gone within %s: %d left", timeout, n)
		}
	}
}

// Stop ends the watch and reports.
func (w *podWatch) Stop() podReport {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	replaced := 0
	for uid := range w.initial {
		if _, ok := w.pods[uid]; !ok {
			replaced++
		}
	}
	return podReport{
		Expected: w.expected, UnavailableAtStart: w.unavailAt0, PeakUnavailable: w.peak,
		Replaced: replaced, Created: w.created, Deleted: w.deleted,
	}
}
