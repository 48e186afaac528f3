package kpsync

import (
	"errors"
	"fmt"
	"path"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/probe"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// validateConfig refuses data kube-proxy itself would refuse to start
// with, before anything is written: the whole data the run would write, or
// the current data when the run restarts kube-proxy on it (any reason, any
// policy, a canary left half-way included). Every key the restarted pods
// read must pass, whoever wrote it: config.conf must be there and pass
// kube-proxy's validation, and the kubeconfig it names must be one
// kube-proxy can start with (checkKubeconfig). The rules are those of the
// kube-proxy version in use (--kube-proxy-version, else the image tag); an
// unknown version gets the newest rules, and the run says so. What
// kube-proxy would load past with a warning (fields it does not have, keys
// given twice) becomes the run's warnings; a --set of a field that this
// kube-proxy does not have is refused, as it would do nothing.
func validateConfig(e *env, ds *appsv1.DaemonSet, p plan) error {
	var set []string
	for _, k := range p.keys {
		if path, ok := strings.CutPrefix(k, configmap.ConfigKey+":"); ok {
			set = append(set, path)
		}
	}
	if len(p.keys) == 0 && p.reason == "" && !p.probe.changes() && !rollout.CanaryLeftover(ds) && p.image == "" {
		return nil // nothing written, nothing restarted
	}
	obj := e.o.Namespace + "/" + e.o.ConfigMap
	text, ok := p.desired[configmap.ConfigKey]
	if !ok {
		return fmt.Errorf("configmap %s has no %q key: kube-proxy reads its configuration from it and would not start; nothing was written and nothing restarted: put the key back (e.g. with --manifest) and run again", obj, configmap.ConfigKey)
	}
	minor, note := kpvalidate.Rules(validationVersion(e.o, ds))
	if note != "" {
		e.warn(note)
	}
	for _, path := range set {
		if f, ok := kpvalidate.Lookup(path); ok && f.Since > minor {
			return fmt.Errorf("configmap %s: setting %s: kube-proxy 1.%d does not have this field (kube-proxy has it from 1.%d on) and would ignore it; nothing was written (pass --kube-proxy-version if 1.%d is not the kube-proxy in use)",
				obj, path, minor, f.Since, minor)
		}
	}
	warns, err := kpvalidate.Validate(text, minor)
	if err != nil {
		return fmt.Errorf("configmap %s: %w; nothing was written: fix the value (or pass --kube-proxy-version if 1.%d is not the kube-proxy in use)", obj, err, minor)
	}
	for _, w := range warns {
		e.warn(fmt.Sprintf("configmap %s: %s", obj, w))
	}
	return validateKubeconfig(e.o, ds, text, p.desired)
}

// validateKubeconfig checks the kubeconfig config.conf names
// (clientConnection.kubeconfig) when kube-proxy reads it from this
// ConfigMap: it must load, and its current context must name a cluster
// with a server. A context or cluster it names but does not have stops
// kube-proxy; no current context, or no server, makes it fall back to its
// in-cluster config, the kubernetes Service's IP, which kube-proxy itself
// programs: on a node that starts fresh it cannot reach the API server,
// and the server kubeadm (or --server) put there is ignored. The CA and
// token files it names are the pod's, not ours to check. An empty clientConnection.kubeconfig is kube-proxy's
// in-cluster config, and a file mounted from elsewhere is not this
// ConfigMap's business.
func validateKubeconfig(o Options, ds *appsv1.DaemonSet, config string, data map[string]string) error {
	file, err := kpvalidate.Kubeconfig(config)
	if err != nil || file == "" {
		return err // err: already refused by Validate
	}
	obj := o.Namespace + "/" + o.ConfigMap
	// the ConfigMap the template mounts: the record, or a copy of it
	name := o.ConfigMap
	if _, m := configVolume(ds, o.Container, o.ConfigMap); m != "" {
		name = m
	}
	key, mounted := mountedKey(ds, o.Container, name, file)
	if !mounted {
		// the container mounts this ConfigMap nowhere we can read (no
		// template, a projected volume): kubeadm's layout, the key named
		// like the file, when there is one
		if _, ok := data[path.Base(file)]; !ok {
			return nil
		}
		key = path.Base(file)
	}
	if key == "" {
		return nil
	}
	text, ok := data[key]
	if !ok {
		return fmt.Errorf("configmap %s has no %q key, which daemonset %s/%s mounts at %s, kube-proxy's clientConnection.kubeconfig: kube-proxy would not start; nothing was written and nothing restarted: put the key back (e.g. with --manifest) and run again",
			obj, key, o.Namespace, o.DaemonSet, file)
	}
	if err := checkKubeconfig(text); err != nil {
		return fmt.Errorf("configmap %s: %s (clientConnection.kubeconfig %s) is not a kubeconfig kube-proxy can start with: %w; nothing was written and nothing restarted: fix the key (e.g. with --manifest) and run again",
			obj, key, file, err)
	}
	return nil
}

// checkKubeconfig checks what kube-proxy needs of its kubeconfig to start:
// it loads, and its current context names a cluster with a server.
func checkKubeconfig(text string) error {
	cfg, err := clientcmd.Load([]byte(text))
	if err != nil {
		return err
	}
	cur := cfg.CurrentContext
	if cur == "" {
		return errors.New("it has no current-context")
	}
	c, ok := cfg.Contexts[cur]
	if !ok {
		return fmt.Errorf("its current-context %q is not one of its contexts", cur)
	}
	cluster, ok := cfg.Clusters[c.Cluster]
	if !ok {
		return fmt.Errorf("cluster %q of the current context %q is not one of its clusters", c.Cluster, cur)
	}
	if cluster.Server == "" {
		return fmt.Errorf("cluster %q of the current context %q has no server", c.Cluster, cur)
	}
	return nil
}

// warnInsecureTLS warns when the kubeconfig.conf kube-proxy will read (the
// live one, or what the run writes) turns off TLS verification: kube-proxy
// then sends its service-account token to whoever answers at the server's
// address. A warning, not a refusal: the cluster may run like this on
// purpose, and the run did not make it so.
func warnInsecureTLS(e *env, data map[string]string) {
	for _, name := range configmap.InsecureClusters(data[configmap.KubeconfigKey]) {
		e.warn(fmt.Sprintf("configmap %s/%s: %s: cluster %q has insecure-skip-tls-verify: true, so kube-proxy does not check the API server's certificate and sends its token to whoever answers; set certificate-authority instead",
			e.o.Namespace, e.o.ConfigMap, configmap.KubeconfigKey, name))
	}
}

// mountedKey is the key of ConfigMap name that the container finds at file,
// laid out as the kubelet does: the deepest mount that holds file decides;
// when it is a volume of this ConfigMap, the key is the volume's item whose
// path is file's (a subPath mount adds its subPath), or without items the
// key named like the file. key is "" when file is not a key of this
// ConfigMap; mounted is false when the container mounts this ConfigMap
// nowhere (or there is no such container).
func mountedKey(ds *appsv1.DaemonSet, container, name, file string) (key string, mounted bool) {
	c, err := findContainer(ds, container)
	if err != nil {
		return "", false
	}
	volumes := map[string]*corev1.ConfigMapVolumeSource{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == name {
			volumes[v.Name] = v.ConfigMap
		}
	}
	file = path.Clean(file)
	deepest := -1
	var from *corev1.ConfigMapVolumeSource
	var rel string
	for _, m := range c.VolumeMounts {
		src, ours := volumes[m.Name]
		mounted = mounted || ours
		dir := path.Clean(m.MountPath)
		var r string
		switch {
		case file == dir:
		case strings.HasPrefix(file, strings.TrimSuffix(dir, "/")+"/"):
			r = strings.TrimPrefix(file, strings.TrimSuffix(dir, "/")+"/")
		default:
			continue
		}
		if len(dir) > deepest {
			deepest, from, rel = len(dir), src, path.Join(m.SubPath, r)
		}
	}
	if from == nil {
		return "", mounted
	}
	if len(from.Items) == 0 {
		if strings.Contains(rel, "/") || rel == "" || rel == "." {
			return "", true
		}
		return rel, true
	}
	for _, it := range from.Items {
		if path.Clean(it.Path) == rel {
			return it.Key, true
		}
	}
	return "", true
}

// validationVersion is the kube-proxy version whose rules apply: never the
// API server's, which may be newer than kube-proxy.
func validationVersion(o Options, ds *appsv1.DaemonSet) string {
	if o.KubeProxyVersion != "" {
		return o.KubeProxyVersion
	}
	c, err := findContainer(ds, o.Container)
	if err != nil {
		return ""
	}
	v, err := probe.ImageVersion(c.Image)
	if err != nil {
		return ""
	}
	return v.String()
}
