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
	return &Rendered{ConfigMap: cm, Image: image, ImageErr: imageErr}, nil
}

// Image picks the image of the container named container of the DaemonSet
// namespace/name out of kubeadm's printed manifests.
func Image(manifests []byte, namespace, name, container string) (string, error) {
	var found string
	err := eachDocument(manifests, func(doc []byte) (bool, error) {
		var ds appsv1.DaemonSet
		if err := yaml.Unmarshal(doc, &ds); err != nil {
			return false, fmt.Errorf("kubeadm's output: %w", err)
		}
		if ds.Kind != "DaemonSet" || ds.Name != name || (ds.Namespace != "" && ds.Namespace != namespace) {
			return false, nil
		}
		for _, c := range ds.Spec.Template.Spec.Containers {
			if c.Name == container && c.Image != "" {
				found = c.Image
				return true, nil
			}
		}
		return false, fmt.Errorf("kubeadm's DaemonSet %s/%s has no container %s with an image", namespace, name, container)
	})
	if err != nil {
		return "", err
	}
	if found == "" {
		return "", fmt.Errorf("kubeadm printed no DaemonSet %s/%s: not the kube-proxy addon's manifests", namespace, name)
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
