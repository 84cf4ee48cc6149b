package bootstrap

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kubeboot/kubeboot/internal/exit"
)

// rejected is a manifest the kubelet would reject, as its error says.
type rejected struct{}

func (rejected) Error() string { return "the kubelet would reject the manifest" }
func (rejected) ExitCode() int { return exit.Rejected }

// TestRetry: a failure a retry may fix is retried after the interval until
// an attempt succeeds; a usage error or a rejected manifest ends the
// attempts at once; so does the context's end.
func TestRetry(t *testing.T) {
	transient := errors.New("the API server does not answer yet")
	cases := []struct {
		name     string
		errs     []error // one per attempt; the last repeats
		cancel   bool
		attempts int
		want     error
	}{
		{name: "retried until it succeeds", errs: []error{transient, transient, nil}, attempts: 3},
		{name: "a usage error is not retried", errs: []error{&exit.UsageError{Msg: "bad field"}}, attempts: 1, want: &exit.UsageError{}},
		{name: "a rejected manifest is not retried", errs: []error{rejected{}}, attempts: 1, want: rejected{}},
		{name: "the context's end ends the attempts", errs: []error{transient}, cancel: true, attempts: 1, want: transient},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var attempts, failures int
			err := Retry(ctx, time.Millisecond, func(context.Context) error {
				err := c.errs[min(attempts, len(c.errs)-1)]
				attempts++
				if c.cancel || attempts > 10 { // a wrong retry ends, and fails
					cancel()
				}
				return err
			}, func(n int, err error) {
				failures++
				if n != failures || err == nil {
					t.Errorf("failure %d reported as attempt %d: %v", failures, n, err)
				}
			})
			if attempts != c.attempts {
				t.Errorf("%d attempts, want %d", attempts, c.attempts)
			}
			if (err == nil) != (c.want == nil) || err != nil && exit.Code(err) != exit.Code(c.want) {
				t.Errorf("err %v, want one of exit code %d", err, exit.Code(c.want))
			}
			if c.want == nil && failures != c.attempts-1 {
				t.Errorf("%d failures reported, want %d", failures, c.attempts-1)
			}
		})
	}
}
