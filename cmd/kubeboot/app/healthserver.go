package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/kubeboot/kubeboot/internal/output"
)

// serveHealth serves the health endpoints of one of kubeboot's pods
// (handler) in plain HTTP on bindAddress:port, until stop, which shuts the
// server down within 5 s and warns of a failure to serve. addr is where it
// listens.
func serveHealth(ctx context.Context, bindAddress string, port int, handler http.Handler, report *output.Reporter) (addr string, stop func(), err error) {
	addr = net.JoinHostPort(bindAddress, strconv.Itoa(port))
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listen on %q: %w", addr, err)
	}
	server := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- server.Serve(listener) }()
	stop = func() {
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			report.Warnf("serve health on %s: %v", addr, err)
		}
	}
	return addr, stop, nil
}
