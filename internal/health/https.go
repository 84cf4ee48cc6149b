package health

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// maxBody bounds how much of a health endpoint's answer is read.
const maxBody = 64 << 10

// httpsCheck GETs each path of an HTTPS endpoint and wants 200 OK.
type httpsCheck struct {
	client *http.Client
	base   string
	paths  []string
	files  tlsFiles
}

func newHTTPSCheck(t Target, tlsConfig *tls.Config, files tlsFiles) *httpsCheck {
	transport := &http.Transport{
		// A proxy from the environment must not see local health checks.
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: dialTimeout}).DialContext,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: dialTimeout,
		// Keeping the connection saves a TLS handshake per poll, which
		// matters with RSA keys at ten polls a second; idle connections
		// close soon after the wait ends.
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     3 * time.Second,
	}
	return &httpsCheck{client: &http.Client{Transport: transport}, base: t.Endpoints[0], paths: t.Paths, files: files}
}

func (c *httpsCheck) check(ctx context.Context) error {
	for _, path := range c.paths {
		if err := c.get(ctx, c.base+path); err != nil {
			return err
		}
	}
	return nil
}

// get asks for the verbose answer every time: the status code is the same,
// and on failure the body lists the failing checks, which saves a second
// request.
func (c *httpsCheck) get(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"?verbose", nil)
	if err != nil {
		return fmt.Errorf("build request %q: %w", url, err)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return classify(url, err, c.files)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return classify(url, err, c.files)
	}
	if resp.StatusCode != http.StatusOK {
		return statusError(url, resp.StatusCode, body, c.files)
	}
	return nil
}
