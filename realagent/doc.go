// Package realagent runs the upstream BOSH agent in a box, to compare
// cpilab's reference agent with it message by message.
//
// The box (cloudfoundry/bosh-agent's binary) is a container on a private Docker
// daemon (scripts/dockerd.sh) whose image is a stemcell-like root
// filesystem built once from the distribution's packages and cached
// (scripts/agentbox.sh), with its own network namespace and the
// capabilities the agent needs (SYS_ADMIN for its mounts, NET_ADMIN for its
// firewall table), answering a NATS server in this process over the mutual
// TLS a BOSH mbus uses. The container reaches the NATS server through a
// unix socket bound into it, so no network is shared with the host.
//
// The box is optional: Start's error wraps ErrUnavailable, saying why, when
// no agent binary is found (FindAgent), no Docker daemon can start or the
// root filesystem cannot be built; tests skip with that text. docs/agent.md
// says how to run it.
package realagent
