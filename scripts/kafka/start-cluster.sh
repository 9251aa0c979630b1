#!/usr/bin/env bash
# Starts a real N-node Apache Kafka 4.x cluster on loopback, in the background:
#   scripts/kafka/start-cluster.sh DIR N BASEPORT
# KRaft combined mode (process.roles=broker,controller), node ids 1..N, a static quorum (controller.quorum.voters),
# node i on 127.0.0.1:BASEPORT+2(i-1) (PLAINTEXT) and BASEPORT+2(i-1)+1 (CONTROLLER), its own server.properties,
# log.dirs and log under DIR/node-i/, all formatted with one cluster id (kafka.tools.StorageTool format),
# offsets.topic.replication.factor=3, heap -Xmx384m, broker.session.timeout.ms=3000.
# Exits 0 once every node answers Metadata listing all N brokers and DescribeQuorum names a leader; prints
# "bootstrap=127.0.0.1:BASEPORT". Stop it with scripts/kafka/stop-cluster.sh DIR [--kill].
# The configs and processes come from tests/interop/cluster.py (the harness the cluster tests use, which starts
# `annal serve --config` nodes from files of the same shape); this is that harness's command line for Kafka.
set -euo pipefail
if [ $# -ne 3 ]; then echo "usage: $0 DIR N BASEPORT" >&2; exit 2; fi
here="$(cd "$(dirname "$0")" && pwd)"
INTEROP_BROKER=kafka exec python3 "$here/../../tests/interop/cluster.py" start "$1" --nodes "$2" --base-port "$3"
