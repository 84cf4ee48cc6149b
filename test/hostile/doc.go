// Package hostile holds the table test of issue 18: each way a careless or
// hostile user could damage a node or its host, run against the kubeboot
// binary in temp dirs, checking the exit code, the message, and that
// nothing outside the intended files changed. It needs no build tag, no
// kubelet and no network: `go test ./test/hostile`.
package hostile
