package exit

import (
	"errors"
	"fmt"
	"testing"
)

func TestCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, OK},
		{"plain", errors.New("boom"), Failure},
		{"usage", &UsageError{Msg: "bad flag"}, Usage},
		{"wrapped usage", fmt.Errorf("phase x: %w", &UsageError{Msg: "bad"}), Usage},
		{"timeout", &TimeoutError{Msg: "slow"}, NotHealthy},
		{"a command's own", &CommandExit{Code: 42}, 42},
	}
	for _, tt := range tests {
		if got := Code(tt.err); got != tt.want {
			t.Errorf("%s: Code = %d, want %d", tt.name, got, tt.want)
		}
	}
}
