#!/usr/bin/env bash
# Starts a real Apache Kafka 4.x broker (KRaft combined mode: broker + controller in one process) in the
# background, bound to loopback only:  scripts/kafka/start.sh DIR PORT
#   clients: 127.0.0.1:PORT   controller: 127.0.0.1:PORT+1   data: DIR/data   log: DIR/kafka.log   pid: DIR/kafka.pid
# Formats DIR on first use, reuses it afterwards (so a restart keeps topics and records). Kafka's defaults apply
# except ports, data dir, and the single-node settings Kafka's own config/server.properties ships with
# (replication factor 1 for internal topics, no initial rebalance delay).
# Prints "kafka ready on 127.0.0.1:PORT (pid N)" and exits 0 once the broker serves; exits 1 if it does not
# within KAFKA_START_TIMEOUT seconds (default 120). Stop it with scripts/kafka/stop.sh DIR.
#   KAFKA_HEAP_OPTS  JVM heap (default -Xms256m -Xmx512m; this machine is shared)
set -euo pipefail
if [ $# -ne 2 ]; then echo "usage: $0 DIR PORT" >&2; exit 2; fi
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$1"
dir="$(cd "$1" && pwd)"
port="$2"
ctrl_port=$((port + 1))
timeout_s="${KAFKA_START_TIMEOUT:-120}"

if [ -f "$dir/kafka.pid" ] && kill -0 "$(cat "$dir/kafka.pid")" 2>/dev/null; then
  echo "kafka already running from $dir (pid $(cat "$dir/kafka.pid")); stop it first: $here/stop.sh $dir" >&2
  exit 1
fi

cp_file="$("$here/fetch.sh")"
classpath="$(cat "$cp_file")"

cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$ctrl_port
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$ctrl_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS

cat > "$dir/log4j2.properties" <<'PROPS'
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = info
logger.state.name = state.change.logger
logger.state.level = warn
PROPS

java_opts=(${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m} -XX:+UseG1GC -Djava.awt.headless=true
  -Dlog4j2.configurationFile="$dir/log4j2.properties")

if [ ! -f "$dir/data/meta.properties" ]; then
  cluster_id="$(java -cp "$classpath" "${java_opts[@]}" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)"
  java -cp "$classpath" "${java_opts[@]}" kafka.tools.StorageTool format -t "$cluster_id" \
    -c "$dir/server.properties" > "$dir/format.log" 2>&1 \
    || { echo "kafka storage format failed, see $dir/format.log" >&2; cat "$dir/format.log" >&2; exit 1; }
fi

: > "$dir/kafka.log"
# setsid + nohup: the broker outlives this script and the shell that ran it.
setsid nohup java -cp "$classpath" "${java_opts[@]}" kafka.Kafka "$dir/server.properties" \
  >> "$dir/kafka.log" 2>&1 < /dev/null &
pid=$!
echo "$pid" > "$dir/kafka.pid"

deadline=$((SECONDS + timeout_s))
while [ $SECONDS -lt $deadline ]; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "kafka exited during start-up; last lines of $dir/kafka.log:" >&2; tail -30 "$dir/kafka.log" >&2; exit 1
  fi
  if grep -q "Kafka Server started" "$dir/kafka.log" && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "kafka ready on 127.0.0.1:$port (pid $pid)"
    exit 0
  fi
  sleep 0.5
done
echo "kafka did not become ready within ${timeout_s}s; see $dir/kafka.log" >&2
exit 1
