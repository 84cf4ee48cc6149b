// Package day2 owns the operations on a running node: upgrade apply (with
// its preflight, etcd snapshot, journal and verified rollback), reset,
// diff, and the verified restart of static pods that certificate renewal
// and upgrades use. The commands run them as Operations (Reset,
// UpgradeApply, Renew): one named step that reports like a phase; diff reads
// only and prints its own result. They reuse init's phases and helpers; they
// are not workflows.
package day2
