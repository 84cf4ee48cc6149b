package health

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
)

// Reason classifies why a check failed; the diagnostics give each reason
// its own likely cause and next commands.
type Reason string

// The reasons a check fails.
const (
	// ReasonRefused: nothing listens on the address.
	ReasonRefused Reason = "refused"
	// ReasonUnreachable: the address cannot be reached from this node.
	ReasonUnreachable Reason = "unreachable"
	// ReasonTimeout: the component did not answer in time.
	ReasonTimeout Reason = "timeout"
	// ReasonTLS: the server certificate does not verify against the CA, or
	// the server rejected the client certificate.
	ReasonTLS Reason = "tls"
	// ReasonCredentials: HTTP 401 or 403.
	ReasonCredentials Reason = "credentials"
	// ReasonUnhealthy: the component answered that it is not healthy.
	ReasonUnhealthy Reason = "unhealthy"
	// ReasonNoLeader: the etcd member has no leader.
	ReasonNoLeader Reason = "no-leader"
	// ReasonAlarm: etcd raised a NOSPACE or CORRUPT alarm.
	ReasonAlarm Reason = "alarm"
	// ReasonOther: any other failure.
	ReasonOther Reason = "other"
)

// ProbeError is a failed check of one endpoint. Its fields let the
// diagnostics name the cause and the files involved.
type ProbeError struct {
	// Reason classifies the failure.
	Reason Reason
	// URL is what was checked.
	URL string
	// Detail says what went wrong, in words.
	Detail string
	// Status is the HTTP status code, or 0.
	Status int
	// FailedChecks are the checks a health endpoint reported failing.
	FailedChecks []string
	// Alarms are the raised etcd alarms, such as "NOSPACE on member 8e9e05c52164694d".
	Alarms []string
	// CAFile, CertFile, KeyFile and ServerCertFile are the host paths of
	// the files the check used or that the component serves with.
	CAFile, CertFile, KeyFile, ServerCertFile string
	// Err is the underlying error, if any.
	Err error
}

// Error is "<url>: <detail>".
func (e *ProbeError) Error() string { return e.URL + ": " + e.Detail }

// Unwrap returns the underlying error.
func (e *ProbeError) Unwrap() error { return e.Err }

// tlsFiles are the host paths of the TLS files of a check, for messages.
type tlsFiles struct {
	ca, cert, key, serverCert string
}

// newProbeError starts a ProbeError about url with the check's files.
func newProbeError(reason Reason, url string, files tlsFiles, err error) *ProbeError {
	return &ProbeError{Reason: reason, URL: url, CAFile: files.ca, CertFile: files.cert, KeyFile: files.key, ServerCertFile: files.serverCert, Err: err}
}

// classify turns a connection or TLS error into a ProbeError that names its
// cause.
func classify(url string, err error, files tlsFiles) *ProbeError {
	var verify *tls.CertificateVerificationError
	var op *net.OpError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		e := newProbeError(ReasonRefused, url, files, err)
		e.Detail = "connection refused: nothing listens there"
		return e
	case errors.As(err, &verify):
		e := newProbeError(ReasonTLS, url, files, err)
		e.Detail = serverCertDetail(verify, files)
		return e
	case errors.As(err, &op) && op.Op == "remote error":
		// crypto/tls reports an alert from the server this way; during a
		// check it means the server refused our client certificate.
		e := newProbeError(ReasonTLS, url, files, err)
		e.Detail = fmt.Sprintf("the server refused the TLS handshake (%v)", op.Err)
		if files.cert != "" {
			e.Detail += ": it does not accept the client certificate " + files.cert
		}
		return e
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EADDRNOTAVAIL):
		e := newProbeError(ReasonUnreachable, url, files, err)
		e.Detail = "unreachable: " + brief(err)
		return e
	case isTimeout(err):
		e := newProbeError(ReasonTimeout, url, files, err)
		e.Detail = "no answer in time"
		return e
	}
	e := newProbeError(ReasonOther, url, files, err)
	e.Detail = brief(err)
	return e
}

// serverCertDetail explains a failed server certificate verification,
// naming the certificate's issuer and names and the CA it was checked with.
func serverCertDetail(verify *tls.CertificateVerificationError, files tlsFiles) string {
	server := "the server certificate"
	if files.serverCert != "" {
		server += " (" + files.serverCert + ")"
	}
	ca := "the system roots"
	if files.ca != "" {
		ca = files.ca
	}
	if len(verify.UnverifiedCertificates) > 0 {
		cert := verify.UnverifiedCertificates[0]
		server += fmt.Sprintf(" issued by %q for %s", cert.Issuer.String(), certNames(cert))
	}
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(verify.Err, &unknown):
		return fmt.Sprintf("%s is not signed by the CA in %s", server, ca)
	case errors.As(verify.Err, &hostname):
		return fmt.Sprintf("%s is not valid for %s (checked against %s)", server, hostname.Host, ca)
	case errors.As(verify.Err, &invalid):
		return fmt.Sprintf("%s is invalid: %v (checked against %s)", server, invalid, ca)
	}
	return fmt.Sprintf("%s does not verify against %s: %v", server, ca, verify.Err)
}

// certNames lists a certificate's subject alternative names.
func certNames(cert *x509.Certificate) string {
	names := append([]string{}, cert.DNSNames...)
	for _, ip := range cert.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "no names"
	}
	return strings.Join(names, ", ")
}

// isTimeout reports whether err is a deadline or a network timeout.
func isTimeout(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout())
}

// brief drops the request and address prefixes of an error, which repeat
// the URL and carry ephemeral port numbers that would make every failure
// look new to Wait.
func brief(err error) string {
	var u *url.Error
	if errors.As(err, &u) {
		err = u.Err
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		err = op.Err
	}
	return err.Error()
}

// statusError explains an HTTP answer other than 200 OK.
func statusError(url string, status int, body []byte, files tlsFiles) *ProbeError {
	e := newProbeError(ReasonUnhealthy, url, files, nil)
	e.Status = status
	switch status {
	case 401:
		e.Reason = ReasonCredentials
		e.Detail = "HTTP 401 Unauthorized: the server did not authenticate the client certificate " + orNone(files.cert)
	case 403:
		e.Reason = ReasonCredentials
		e.Detail = fmt.Sprintf("HTTP 403 Forbidden: the user of the client certificate %s may not read this path: %s", orNone(files.cert), firstLine(body))
	default:
		e.FailedChecks = failedChecks(body)
		if len(e.FailedChecks) > 0 {
			e.Detail = fmt.Sprintf("HTTP %d: failing checks: %s", status, strings.Join(e.FailedChecks, ", "))
		} else {
			e.Detail = fmt.Sprintf("HTTP %d: %s", status, firstLine(body))
		}
	}
	return e
}

// failedChecks reads the names of the failing checks from a verbose health
// endpoint body, where each failing check is a line like
// "[-]etcd failed: reason withheld".
func failedChecks(body []byte) []string {
	var names []string
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "[-]"); ok {
			name, _, _ := strings.Cut(rest, " ")
			names = append(names, name)
		}
	}
	return names
}

// firstLine returns the first non-empty line of an HTTP body, shortened.
func firstLine(body []byte) string {
	for _, line := range strings.Split(string(body), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			if len(line) > 200 {
				line = line[:200] + "..."
			}
			return line
		}
	}
	return "empty body"
}

// orNone names a file, or says that there is none.
func orNone(file string) string {
	if file == "" {
		return "(none)"
	}
	return file
}
