package kpsync

import (
	"fmt"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
)

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
