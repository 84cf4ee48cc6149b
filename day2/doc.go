// Package day2 owns the operations on a running node: upgrade apply (with
// its preflight, etcd snapshot, journal and verified rollback), reset,
// diff, and the verified restart of static pods that certificate renewal
// and upgrades use. Each is an Operation: one named step that reports like
// a phase. They reuse init's phases and helpers; they are not workflows.
package day2
