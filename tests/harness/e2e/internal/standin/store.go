// Package standin holds what the KFP stand-ins (kfp-launcher-standin, kfp-driver-standin) share:
// finding the run's object store.
package standin

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

const serviceAccount = "/var/run/secrets/kubernetes.io/serviceaccount"

// ObjectStore is `standinStore` of the kfp-launcher ConfigMap of the pod's namespace, read with the
// pod's service-account token (KFP's launcher reads its object store settings from that ConfigMap
// too); "" when the pod has no token or the ConfigMap or the key is absent.
func ObjectStore() (string, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	token, err := os.ReadFile(serviceAccount + "/token")
	if host == "" || err != nil {
		return "", nil
	}
	namespace, _ := os.ReadFile(serviceAccount + "/namespace")
	ca, _ := os.ReadFile(serviceAccount + "/ca.crt")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	url := fmt.Sprintf("https://%s:%s/api/v1/namespaces/%s/configmaps/kfp-launcher", host, port, namespace)
	request, _ := http.NewRequest(http.MethodGet, url, nil)
	request.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	response, err := client.Do(request)
	if err != nil {
		return "", fmt.Errorf("reading the kfp-launcher ConfigMap: %v", err)
	}
	defer response.Body.Close()
	if response.StatusCode == http.StatusNotFound {
		return "", nil
	}
	var config struct {
		Data map[string]string `json:"data"`
	}
	if response.StatusCode != http.StatusOK || json.NewDecoder(response.Body).Decode(&config) != nil {
		return "", fmt.Errorf("reading the kfp-launcher ConfigMap: %s", response.Status)
	}
	return strings.TrimSuffix(config.Data["standinStore"], "/"), nil
}
