package etcd

import (
	"context"
	"fmt"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Describe tells what the cluster behind cli looks like, for people: a
// summary line (members, leader, learners), then one line per member with
// its endpoint and health.
func Describe(ctx context.Context, cli *clientv3.Client) ([]string, error) {
	lctx, cancel := context.WithTimeout(ctx, requestTimeout)
	list, err := cli.MemberList(lctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("list etcd members: %w", err)
	}
	names := map[uint64]string{}
	var learners, lines []string
	var leader uint64
	for _, m := range list.Members {
		names[m.ID] = m.Name
		if m.Name == "" {
			// A learner that has not started yet has no name.
			names[m.ID] = "unstarted " + strings.Join(m.PeerURLs, ",")
		}
		if m.IsLearner {
			learners = append(learners, names[m.ID])
		}
	}
	for _, m := range list.Members {
		role := "voter"
		if m.IsLearner {
			role = "learner"
		}
		state := "not answering"
		for _, u := range m.ClientURLs {
			sctx, cancel := context.WithTimeout(ctx, statusTimeout)
			st, err := cli.Status(sctx, u)
			cancel()
			if err != nil {
				state = "not answering: " + err.Error()
				continue
			}
			leader = st.Leader
			state = fmt.Sprintf("healthy, raft index %d", st.RaftIndex)
			if len(st.Errors) > 0 {
				state = "errors: " + strings.Join(st.Errors, "; ")
			}
			break
		}
		lines = append(lines, fmt.Sprintf("etcd member %s (%x, %s) at %s: %s", names[m.ID], m.ID, role, strings.Join(m.ClientURLs, ","), state))
	}
	slices.Sort(lines)
	leaderName := "none"
	if leader != 0 {
		leaderName = fmt.Sprintf("%s (%x)", names[leader], leader)
	}
	learnerText := "none"
	if len(learners) > 0 {
		learnerText = strings.Join(learners, ", ")
	}
	summary := fmt.Sprintf("etcd cluster: %d members, leader %s, learners: %s", len(list.Members), leaderName, learnerText)
	return append([]string{summary}, lines...), nil
}
