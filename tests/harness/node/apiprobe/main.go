// apiprobe is what an in-cluster client does first, for the test node's pods (tests/node): it
// reads the pod's projected service-account token and the cluster CA (kube-root-ca.crt) from
// /var/run/secrets/kubernetes.io/serviceaccount, checks the API server's certificate against that
// CA, and creates a SelfSubjectReview with the token: the answer, printed as it came, names the
// pod's account and the pod. Standard library only; built static (CGO_ENABLED=0) by build.sh.
//
//	apiprobe https://<API server address>:<port>    (or $API_SERVER)
//
// $CA_FILE, when set, names another CA file (a test shows the probe refusing a server it signed not).
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

const accountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	server := os.Getenv("API_SERVER")
	if len(os.Args) > 1 {
		server = os.Args[1]
	}
	if server == "" {
		fail("usage: apiprobe https://host:port (or API_SERVER)")
	}
	caFile := os.Getenv("CA_FILE")
	if caFile == "" {
		caFile = accountDir + "/ca.crt"
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		fail("reading the cluster CA: %v", err)
	}
	token, err := os.ReadFile(accountDir + "/token")
	if err != nil {
		fail("reading the service-account token: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		fail("no certificate in %s", caFile)
	}
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		},
	}
	review := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	url := strings.TrimSuffix(server, "/") + "/apis/authentication.k8s.io/v1/selfsubjectreviews"
	request, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(review))
	if err != nil {
		fail("%v", err)
	}
	request.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	request.Header.Set("Content-Type", "application/json")
	request.Header.Set("Accept", "application/json")
	response, err := client.Do(request)
	if err != nil {
		fail("%v", err)
	}
	defer response.Body.Close()
	body, err := io.ReadAll(response.Body)
	if err != nil {
		fail("reading the answer: %v", err)
	}
	os.Stdout.Write(body)
	if response.StatusCode != http.StatusCreated {
		fail("\nHTTP %d", response.StatusCode)
	}
}

func fail(format string, arguments ...any) {
	fmt.Fprintf(os.Stderr, "apiprobe: "+format+"\n", arguments...)
	os.Exit(1)
}
