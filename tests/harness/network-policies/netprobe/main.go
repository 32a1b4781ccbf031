// netprobe is the test node's traffic for NetworkPolicy tests (tests/node): a TCP echo server and
// a client that says whether a connection got through. Standard library only; built static.
//
//	netprobe serve [ADDRESS ...]      echo every connection's lines back, prefixed with the
//	                                  server's name ($NETPROBE_NAME, else the hostname) and the
//	                                  address it listens on; default :8080
//	netprobe connect HOST:PORT [...]  for each target print `HOST:PORT open <reply>` or
//	                                  `HOST:PORT closed <error>`, trying all at once; exit 0
//	                                  (the verdicts are the output). $NETPROBE_TIMEOUT (Go duration, default 3s) bounds
//	                                  each connection, dial and echo together.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: netprobe serve [ADDRESS] | netprobe connect HOST:PORT ...")
	}
	switch os.Args[1] {
	case "serve":
		addresses := os.Args[2:]
		if len(addresses) == 0 {
			addresses = []string{":8080"}
		}
		serve(addresses)
	case "connect":
		timeout := 3 * time.Second
		if value := os.Getenv("NETPROBE_TIMEOUT"); value != "" {
			parsed, err := time.ParseDuration(value)
			if err != nil {
				fail("NETPROBE_TIMEOUT: %v", err)
			}
			timeout = parsed
		}
		targets := os.Args[2:]
		verdicts := make([]chan string, len(targets))
		for i, target := range targets { // all at once: a refused one costs the timeout
			verdicts[i] = make(chan string, 1)
			go func(target string, verdict chan<- string) {
				verdict <- connect(target, timeout)
			}(target, verdicts[i])
		}
		for i, target := range targets {
			fmt.Println(target, <-verdicts[i])
		}
	default:
		fail("unknown command %q", os.Args[1])
	}
}

func serve(addresses []string) {
	name := os.Getenv("NETPROBE_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	listeners := make([]net.Listener, 0, len(addresses))
	for _, address := range addresses {
		listener, err := net.Listen("tcp", address)
		if err != nil {
			fail("listening on %s: %v", address, err)
		}
		fmt.Printf("netprobe %s listening on %s\n", name, listener.Addr())
		listeners = append(listeners, listener)
	}
	done := make(chan struct{})
	for _, listener := range listeners {
		go accept(listener, name)
	}
	<-done
}

func accept(listener net.Listener, name string) {
	for {
		connection, err := listener.Accept()
		if err != nil {
			fail("accept: %v", err)
		}
		go func(connection net.Conn) {
			defer connection.Close()
			_ = connection.SetDeadline(time.Now().Add(10 * time.Second))
			lines := bufio.NewScanner(connection)
			for lines.Scan() {
				fmt.Fprintf(connection, "%s@%s: %s\n", name, listener.Addr(), lines.Text())
			}
		}(connection)
	}
}

func connect(target string, timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	connection, err := net.DialTimeout("tcp", target, timeout)
	if err != nil {
		return "closed " + err.Error()
	}
	defer connection.Close()
	_ = connection.SetDeadline(deadline)
	if _, err := fmt.Fprintln(connection, "ping"); err != nil {
		return "closed " + err.Error()
	}
	reply, err := bufio.NewReader(connection).ReadString('\n')
	if err != nil {
		return "closed " + err.Error()
	}
	return "open " + strings.TrimSpace(reply)
}

func fail(format string, arguments ...any) {
	fmt.Fprintf(os.Stderr, "netprobe: "+format+"\n", arguments...)
	os.Exit(1)
}
