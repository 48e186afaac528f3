// Package kubeadm renders kube-proxy's ConfigMap the way kubeadm writes it,
// from a kubeadm configuration (kubespray's, say), by running the kubeadm
// binary already on the host: `kubeadm init phase addon kube-proxy
// --config FILE --print-manifest` prints the objects instead of writing
// them, and needs no cluster. Every KubeProxyConfiguration field and
// default the configuration means reaches kube-proxy with no mapping to
// keep up to date.
package kubeadm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// maxOutput bounds what is read of kubeadm's output: its manifests are a
// few KiB, a ConfigMap at most 1 MiB.
const maxOutput = 4 << 20

// kubeadm's kube-proxy ConfigMap: kubeadm always writes it under these names.
const (
	Namespace = "kube-system"
	Name      = "kube-proxy"
)

// Rendered is what kubeadm would write for kube-proxy.
type Rendered struct {
	// ConfigMap is kube-system/kube-proxy. Its data is what the caller
	// applies, to whichever ConfigMap it syncs: kubeadm's names are fixed,
	// and a kube-proxy kept elsewhere (another namespace, a test's) takes
	// the same data.
	ConfigMap *corev1.ConfigMap
	// Image is the image of the DaemonSet's kube-proxy container: the
	// configuration's kubernetesVersion and imageRepository ("" when
	// kubeadm printed no such DaemonSet).
	Image string
	// ImageErr says why Image is "": only a run that asks for kubeadm's
	// image (--image kubeadm) fails on it.
	ImageErr error
	// Template is the DaemonSet's pod template (nil when kubeadm printed
	// none), TemplateErr why: only a run that takes it (--template
	// kubeadm) fails on that.
	Template    *corev1.PodTemplateSpec
	TemplateErr error
	// Access is kube-proxy's ServiceAccount and RBAC as kubeadm renders
	// them (the rest of its addon), AccessErr why they could not be read:
	// only a run that takes them (--template kubeadm) fails on that.
	Access    Access
	AccessErr error
}

// Access is the part of kubeadm's kube-proxy addon that gives kube-proxy
// (and joining nodes) their access: its ServiceAccount, the binding of it
// to system:node-proxier, and the Role and RoleBinding that let joining
// nodes read the ConfigMap.
type Access struct {
	ServiceAccounts     []*corev1.ServiceAccount
	Roles               []*rbacv1.Role
	RoleBindings        []*rbacv1.RoleBinding
	ClusterRoleBindings []*rbacv1.ClusterRoleBinding
}

// access picks kubeadm's ServiceAccounts, Roles, RoleBindings and
// ClusterRoleBindings out of its printed manifests.
func access(manifests []byte) (Access, error) {
	var a Access
	err := eachDocument(manifests, func(doc []byte) (bool, error) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return false, fmt.Errorf("kubeadm's output: %w", err)
		}
		var into any
		switch meta.APIVersion + " " + meta.Kind {
		case "v1 ServiceAccount":
			sa := &corev1.ServiceAccount{}
			a.ServiceAccounts, into = append(a.ServiceAccounts, sa), sa
		case "rbac.authorization.k8s.io/v1 Role":
			r := &rbacv1.Role{}
			a.Roles, into = append(a.Roles, r), r
		case "rbac.authorization.k8s.io/v1 RoleBinding":
			b := &rbacv1.RoleBinding{}
			a.RoleBindings, into = append(a.RoleBindings, b), b
		case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
			b := &rbacv1.ClusterRoleBinding{}
			a.ClusterRoleBindings, into = append(a.ClusterRoleBindings, b), b
		default:
			return false, nil
		}
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			return false, fmt.Errorf("kubeadm's %s has what this kube-proxy-sync does not know, so applying it would drop it: %w; use a kube-proxy-sync built for this kubeadm's Kubernetes version", meta.Kind, err)
		}
		return false, nil
	})
	return a, err
}

// Stdin, as the config of Render, hands kubeadm the configuration given as
// data on its standard input (/dev/stdin): the configuration, which holds
// kubeadm's join token and certificate key, never touches a disk.
const Stdin = "-"

// Render runs binary (a path, or a name looked up in PATH) on the kubeadm
// configuration file config, or on data when config is Stdin, and returns
// what kubeadm would write.
func Render(ctx context.Context, binary, config string, data []byte) (*Rendered, error) {
	path, err := exec.LookPath(binary)
	if err != nil {
		return nil, fmt.Errorf("kubeadm %q: %w: kube-proxy-sync runs the host's kubeadm to render kube-proxy's config from --kubeadm-config; install it or pass --kubeadm PATH", binary, err)
	}
	run, cancel := context.WithTimeoutCause(ctx, time.Minute, errors.New("kubeadm took longer than a minute"))
	defer cancel()
	file := config
	if config == Stdin {
		file = "/dev/stdin"
		config = "- (stdin)"
	}
	cmd := exec.CommandContext(run, path, "init", "phase", "addon", "kube-proxy", "--config", file, "--print-manifest")
	if file == "/dev/stdin" {
		cmd.Stdin = bytes.NewReader(data)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run %s: %w", path, err)
	}
	out, readErr := io.ReadAll(io.LimitReader(stdout, maxOutput+1))
	waitErr := cmd.Wait()
	if run.Err() != nil {
		why := context.Cause(run) // the minute's, or the run's
		if ctx.Err() != nil {
			why = fmt.Errorf("interrupted: %w", context.Cause(ctx))
		}
		return nil, fmt.Errorf("%s init phase addon kube-proxy --config %s --print-manifest stopped: %w; nothing was changed", path, config, why)
	}
	if waitErr != nil {
		return nil, fmt.Errorf("%s init phase addon kube-proxy --config %s --print-manifest: %w: %s; nothing was changed: fix the kubeadm configuration", path, config, waitErr, strings.TrimSpace(stderr.String()))
	}
	if readErr != nil {
		return nil, fmt.Errorf("read the output of %s: %w", path, readErr)
	}
	if len(out) > maxOutput {
		return nil, fmt.Errorf("%s printed more than %d bytes: not kube-proxy's manifests", path, maxOutput)
	}
	cm, err := ConfigMap(out, Namespace, Name)
	if err != nil {
		return nil, err
	}
	// the image only matters to a run that asks for it (--image kubeadm),
	// which fails on ImageErr
	image, imageErr := Image(out, Namespace, Name, Name)
	template, templateErr := Template(out, Namespace, Name)
	acc, accessErr := access(out)
	return &Rendered{ConfigMap: cm, Image: image, ImageErr: imageErr, Template: template, TemplateErr: templateErr, Access: acc, AccessErr: accessErr}, nil
}

// Image picks the image of the container named container of the DaemonSet
// namespace/name out of kubeadm's printed manifests.
func Image(manifests []byte, namespace, name, container string) (string, error) {
	ds, err := daemonSet(manifests, namespace, name)
	if err != nil {
		return "", err
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == container && c.Image != "" {
			return c.Image, nil
		}
	}
	return "", fmt.Errorf("kubeadm's DaemonSet %s/%s has no container %s with an image", namespace, name, container)
}

// Template picks the pod template of the DaemonSet namespace/name out of
// kubeadm's printed manifests. It is taken whole (--template kubeadm), so
// it is read strictly: a field this build's API types do not know (a
// newer kubeadm's) would be dropped, and the DaemonSet would lose it.
func Template(manifests []byte, namespace, name string) (*corev1.PodTemplateSpec, error) {
	ds, err := daemonSet(manifests, namespace, name)
	if err != nil {
		return nil, err
	}
	var strict appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(ds.raw, &strict); err != nil {
		return nil, fmt.Errorf("kubeadm's DaemonSet %s/%s has what this kube-proxy-sync does not know, so taking its template would drop it: %w; use a kube-proxy-sync built for this kubeadm's Kubernetes version", namespace, name, err)
	}
	if len(ds.Spec.Template.Spec.Containers) == 0 {
		return nil, fmt.Errorf("kubeadm's DaemonSet %s/%s has no containers", namespace, name)
	}
	return &strict.Spec.Template, nil
}

// printedDaemonSet is a DaemonSet kubeadm printed, and its document.
type printedDaemonSet struct {
	appsv1.DaemonSet
	raw []byte
}

// daemonSet picks the DaemonSet namespace/name out of kubeadm's printed
// manifests.
func daemonSet(manifests []byte, namespace, name string) (*printedDaemonSet, error) {
	var found *printedDaemonSet
	err := eachDocument(manifests, func(doc []byte) (bool, error) {
		var ds appsv1.DaemonSet
		if err := yaml.Unmarshal(doc, &ds); err != nil {
			return false, fmt.Errorf("kubeadm's output: %w", err)
		}
		if ds.Kind != "DaemonSet" || ds.Name != name || (ds.Namespace != "" && ds.Namespace != namespace) {
			return false, nil
		}
		found = &printedDaemonSet{DaemonSet: ds, raw: doc}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, fmt.Errorf("kubeadm printed no DaemonSet %s/%s: not the kube-proxy addon's manifests", namespace, name)
	}
	return found, nil
}

// eachDocument calls fn with each YAML document of manifests until it
// returns true or an error.
func eachDocument(manifests []byte, fn func(doc []byte) (bool, error)) error {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifests)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("kubeadm's output: %w", err)
		}
		if done, err := fn(doc); done || err != nil {
			return err
		}
	}
}

// ConfigMap picks the ConfigMap namespace/name out of kubeadm's printed
// manifests (YAML documents).
func ConfigMap(manifests []byte, namespace, name string) (*corev1.ConfigMap, error) {
	var kinds []string
	var found *corev1.ConfigMap
	err := eachDocument(manifests, func(doc []byte) (bool, error) {
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal(doc, &cm); err != nil {
			return false, fmt.Errorf("kubeadm's output: %w", err)
		}
		if cm.Kind == "" {
			return false, nil // an empty document
		}
		kinds = append(kinds, cm.Kind+" "+cm.Name)
		if cm.APIVersion == "v1" && cm.Kind == "ConfigMap" && cm.Name == name && (cm.Namespace == "" || cm.Namespace == namespace) {
			if len(cm.Data) == 0 {
				return false, fmt.Errorf("kubeadm's ConfigMap %s/%s has no data", namespace, name)
			}
			found = &cm
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, fmt.Errorf("kubeadm printed no ConfigMap %s/%s (it printed: %s): not the kube-proxy addon's manifests", namespace, name, strings.Join(kinds, ", "))
	}
	return found, nil
}
