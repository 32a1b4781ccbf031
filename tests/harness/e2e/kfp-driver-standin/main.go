// Command kfp-driver-standin is a STAND-IN for KFP 2.17's driver (backend/src/v2/cmd/driver), which
// cannot be built here: the Go module proxy refuses github.com/kubeflow/pipelines, and KFP 2.17's
// driver needs the ML Metadata server besides. It takes the driver's command line as KFP 2.17's
// compiler writes it into the Workflow (every flag of the real driver, with its type; an unknown
// flag is an error) and writes the outputs the Workflow's templates read, nothing more:
//
//	driver --type CONTAINER ... --run_name R --task_name T --pod_spec_patch_path P
//	       --cached_decision_path C --condition_path D ...
//	    P: the pod spec patch a test published for (R, T): GET <store>/kfp-driver-standin/R/T/pod-spec-patch,
//	       retried while it answers 404 (up to a minute); C: false (never cached); D: true
//	driver --type ROOT_DAG|DAG ... --execution_id_path E --iteration_count_path I --condition_path D
//	    E: 1 (the DAG's execution id, which the tasks get as --dag_execution_id); I: 0; D: true
//
// The patch is what KFP's driver computes (secureml's preview computes it the same way;
// tests/harness/kfp_workflow.py driver_patches and patch_key). The store is the run's plain HTTP
// object store: the key `standinStore` of the `kfp-launcher` ConfigMap of the pod's namespace, read
// with the pod's service-account token, as the kfp-launcher stand-in finds it.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"secureml.dev/tests/harness/e2e/internal/standin"
)

const (
	patchPrefix     = "kfp-driver-standin"
	dagExecutionID  = "1"
	publishDeadline = time.Minute
)

// The real driver's flags (KFP 2.17.0 backend/src/v2/cmd/driver/main.go): names and types only.
var (
	driverType    = flag.String("type", "", "ROOT_DAG, DAG or CONTAINER")
	runName       = flag.String("run_name", "", "the Workflow's name")
	taskName      = flag.String("task_name", "", "the task's name")
	executionID   = flag.String("execution_id_path", "", "DAG: execution id output")
	iterationPath = flag.String("iteration_count_path", "", "DAG: iteration count output")
	patchPath     = flag.String("pod_spec_patch_path", "", "CONTAINER: pod spec patch output")
	cachedPath    = flag.String("cached_decision_path", "", "CONTAINER: cached decision output")
	conditionPath = flag.String("condition_path", "", "condition output")
)

func init() {
	for _, name := range []string{
		"pipeline_name", "run_id", "run_display_name", "pipeline_job_create_time_utc",
		"pipeline_job_schedule_time_epoch_seconds", "component", "task", "runtime_config",
		"container", "kubernetes_config", "ml_pipeline_server_address", "ml_pipeline_server_port",
		"mlmd_server_address", "mlmd_server_port", "log_level", "http_proxy", "https_proxy",
		"no_proxy", "publish_logs", "ca_cert_path", "default_run_as_non_root", "default_host_users",
	} {
		flag.String(name, "", "accepted, not used by the stand-in")
	}
	flag.Int("iteration_index", -1, "accepted, not used by the stand-in")
	for _, name := range []string{"dag_execution_id", "default_run_as_user", "default_run_as_group"} {
		flag.Int64(name, 0, "accepted, not used by the stand-in")
	}
	for _, name := range []string{"cache_disabled", "ml_pipeline_tls_enabled", "metadata_tls_enabled"} {
		flag.Bool(name, false, "accepted, not used by the stand-in")
	}
}

func main() {
	flag.CommandLine.Init("driver", flag.ContinueOnError)
	flag.CommandLine.SetOutput(io.Discard) // the error is reported below, without the usage
	if err := flag.CommandLine.Parse(os.Args[1:]); err != nil {
		fail("%v", err)
	}
	if flag.NArg() > 0 {
		fail("unexpected arguments %q", flag.Args())
	}
	switch *driverType {
	case "ROOT_DAG", "DAG":
		write(*executionID, dagExecutionID, true)
		write(*iterationPath, "0", false)
		write(*conditionPath, "true", false)
	case "CONTAINER":
		if *runName == "" || *taskName == "" {
			fail("CONTAINER needs --run_name and --task_name")
		}
		patch := fetchPatch(objectStore(), *runName, *taskName)
		write(*patchPath, patch, true)
		write(*cachedPath, "false", true)
		write(*conditionPath, "true", false)
		fmt.Fprintf(os.Stderr, "kfp-driver (stand-in): %s/%s: pod spec patch of %d bytes\n",
			*runName, *taskName, len(patch))
	default:
		fail("--type %q: one of ROOT_DAG, DAG, CONTAINER", *driverType)
	}
}

func fail(format string, values ...any) {
	fmt.Fprintf(os.Stderr, "kfp-driver (stand-in): "+format+"\n", values...)
	os.Exit(1)
}

func write(path, value string, required bool) {
	if path == "" {
		if required {
			fail("--type %s needs every output path of KFP's template", *driverType)
		}
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		fail("%v", err)
	}
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		fail("%v", err)
	}
}

// fetchPatch waits for the patch a test publishes for (run, task) and checks that it is a JSON object.
func fetchPatch(store, run, task string) string {
	url := fmt.Sprintf("%s/%s/%s/%s/pod-spec-patch", store, patchPrefix, run, task)
	client := &http.Client{Timeout: 10 * time.Second}
	deadline := time.Now().Add(publishDeadline)
	for {
		response, err := client.Get(url)
		status := ""
		if err == nil {
			body, readErr := io.ReadAll(response.Body)
			response.Body.Close()
			if response.StatusCode == http.StatusOK && readErr == nil {
				var object map[string]any
				if json.Unmarshal(body, &object) != nil {
					fail("GET %s: not a JSON object", url)
				}
				return string(body)
			}
			status = response.Status
			if response.StatusCode != http.StatusNotFound {
				fail("GET %s: %s", url, status)
			}
		} else {
			status = err.Error()
		}
		if time.Now().After(deadline) {
			fail("GET %s: nothing published within %s (last: %s)", url, publishDeadline, status)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// objectStore is the run's store; the driver cannot go on without it.
func objectStore() string {
	store, err := standin.ObjectStore()
	if err != nil {
		fail("%v", err)
	}
	if store == "" {
		fail("no object store: no standinStore in the kfp-launcher ConfigMap of the pod's namespace, or no service-account token")
	}
	return store
}
