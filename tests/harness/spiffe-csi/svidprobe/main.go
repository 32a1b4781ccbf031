// svidprobe fetches the X.509 SVID of the process it runs in from the SPIFFE Workload API, as a
// workload does first, for the test node's pods (tests/node): it prints the SVID's SPIFFE ID and
// how long the fetch took, or fails (exit 1) with the error.
//
//	svidprobe [unix:///path/to/socket]    (default $SPIFFE_ENDPOINT_SOCKET)
//
// It asks again every 200 ms until $SVIDPROBE_TIMEOUT (a Go duration, default 10s) has passed: a
// new pod's entry reaches the agent a moment after the pod starts (spire-controller-manager, then
// the agent's sync), and until then the agent answers "no identity issued". A failure reports the
// agent's last answer (not the deadline that cut the last attempt short). Built static.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func main() {
	address := os.Getenv("SPIFFE_ENDPOINT_SOCKET")
	if len(os.Args) > 1 {
		address = os.Args[1]
	}
	if address == "" {
		fail("usage: svidprobe unix:///path/to/socket (or SPIFFE_ENDPOINT_SOCKET)")
	}
	timeout := 10 * time.Second
	if value := os.Getenv("SVIDPROBE_TIMEOUT"); value != "" {
		parsed, err := time.ParseDuration(value)
		if err != nil {
			fail("SVIDPROBE_TIMEOUT: %v", err)
		}
		timeout = parsed
	}
	started := time.Now()
	deadline := started.Add(timeout)
	var svid *x509svid.SVID
	attempts := 0
	var answer error // the last error that is not the deadline cutting an attempt short
	for {
		attempts++
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		fetched, err := workloadapi.FetchX509SVID(ctx, workloadapi.WithAddr(address))
		cancel()
		if err == nil {
			svid = fetched
			break
		}
		if status.Code(err) != codes.DeadlineExceeded { // the agent's own answer, not our deadline
			answer = err
		}
		if time.Now().Add(200 * time.Millisecond).After(deadline) {
			if answer == nil {
				answer = err
			}
			fail("no X.509 SVID from %s after %d attempts in %s: %v", address, attempts,
				time.Since(started).Round(time.Millisecond), answer)
		}
		time.Sleep(200 * time.Millisecond)
	}
	result := map[string]any{
		"spiffe_id":  svid.ID.String(),
		"not_after":  svid.Certificates[0].NotAfter.UTC().Format(time.RFC3339),
		"fetch_ms":   time.Since(started).Milliseconds(),
		"chain_size": len(svid.Certificates),
		"attempts":   attempts,
	}
	encoded, _ := json.Marshal(result)
	fmt.Println(string(encoded))
}

func fail(format string, arguments ...any) {
	fmt.Fprintf(os.Stderr, "svidprobe: "+format+"\n", arguments...)
	os.Exit(1)
}
