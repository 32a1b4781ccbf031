// Command kfp-launcher-standin is a STAND-IN for KFP 2.17's launcher (backend/src/v2/cmd/launcher-v2),
// which cannot be built here: the Go module proxy refuses github.com/kubeflow/pipelines. It does
// what a step pod needs of KFP's launcher, nothing more:
//
//	launcher-v2 --copy /kfp-launcher/launch [flags]   copy this binary there (the init container)
//	launch [--flag value]... -- command [args]...      the main container's entry, after the emissary
//
// As `launch` it replaces `{{$}}` in the command with --executor_input (as KFP's launcher does),
// downloads the input artifacts from the run's object store to their local paths (/minio/<key>,
// KFP's mapping of minio://<key>), runs the command as a child with its stdout and stderr, uploads
// the output artifacts, and exits with the command's status. The object store is a plain HTTP
// store whose address is the key `standinStore` of the `kfp-launcher` ConfigMap of the pod's
// namespace (KFP's launcher reads its object store settings from that ConfigMap too), read with
// the pod's service-account token; without that key no artifact is moved. An output artifact the
// step wrote no file for (system.Metrics, kept in the executor output's metadata) is not uploaded.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"secureml.dev/tests/harness/e2e/internal/standin"
)

func main() {
	args := os.Args[1:]
	if len(args) >= 2 && args[0] == "--copy" {
		if err := copySelf(args[1]); err != nil {
			fail("copy: %v", err)
		}
		return
	}
	flags := map[string]string{}
	command := []string(nil)
	for i := 0; i < len(args); i++ {
		if args[i] == "--" {
			command = args[i+1:]
			break
		}
		if strings.HasPrefix(args[i], "--") && i+1 < len(args) {
			flags[args[i]] = args[i+1]
			i++
		}
	}
	if len(command) == 0 {
		fail("no command after --")
	}
	input := flags["--executor_input"]
	for i, arg := range command {
		command[i] = strings.ReplaceAll(arg, "{{$}}", input)
	}
	store, err := standin.ObjectStore()
	if err != nil {
		fail("%v", err)
	}
	var artifacts executorInput
	if input != "" && json.Unmarshal([]byte(input), &artifacts) != nil {
		fail("--executor_input is not JSON")
	}
	if store != "" {
		for _, list := range artifacts.Inputs.Artifacts {
			for _, a := range list.Artifacts {
				if err := download(store, a.URI); err != nil {
					fail("input artifact %s: %v", a.URI, err)
				}
			}
		}
	}
	child := exec.Command(command[0], command[1:]...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = child.Run()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		fail("running %s: %v", command[0], err)
	}
	if code == 0 && store != "" {
		for _, list := range artifacts.Outputs.Artifacts {
			for _, a := range list.Artifacts {
				if err := upload(store, a.URI); err != nil {
					fail("output artifact %s: %v", a.URI, err)
				}
			}
		}
	}
	os.Exit(code)
}

type artifactList struct {
	Artifacts []struct {
		URI string `json:"uri"`
	} `json:"artifacts"`
}

type executorInput struct {
	Inputs struct {
		Artifacts map[string]artifactList `json:"artifacts"`
	} `json:"inputs"`
	Outputs struct {
		Artifacts map[string]artifactList `json:"artifacts"`
	} `json:"outputs"`
}

func fail(format string, values ...any) {
	fmt.Fprintf(os.Stderr, "kfp-launcher (stand-in): "+format+"\n", values...)
	os.Exit(1)
}

func copySelf(target string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	return os.WriteFile(target, data, 0o755)
}

// localPath is KFP's mapping of an artifact URI to the pod's file system (minio:// -> /minio/).
func localPath(uri string) (string, string, error) {
	for _, scheme := range []string{"minio", "s3", "gs"} {
		prefix := scheme + "://"
		if strings.HasPrefix(uri, prefix) {
			folder := map[string]string{"minio": "/minio/", "s3": "/s3/", "gs": "/gcs/"}[scheme]
			key := strings.TrimPrefix(uri, prefix)
			return filepath.Join(folder, key), key, nil
		}
	}
	return "", "", fmt.Errorf("unsupported URI")
}

func download(store, uri string) error {
	path, key, err := localPath(uri)
	if err != nil {
		return err
	}
	response, err := http.Get(store + "/" + key)
	if err != nil {
		return err
	}
	defer response.Body.Close()
	if response.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", key, response.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := io.ReadAll(response.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func upload(store, uri string) error {
	path, key, err := localPath(uri)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) { // metrics live in the executor output's metadata, not in a file
		return nil
	}
	if err != nil {
		return err
	}
	request, err := http.NewRequest(http.MethodPut, store+"/"+key, bytes.NewReader(data))
	if err != nil {
		return err
	}
	response, err := http.DefaultClient.Do(request)
	if err != nil {
		return err
	}
	defer response.Body.Close()
	if response.StatusCode/100 != 2 {
		return fmt.Errorf("PUT %s: %s", key, response.Status)
	}
	return nil
}
