#!/usr/bin/env bash
# Resolves Kafka Streams 4.x from Maven Central (Maven only) and writes their
# classpath to $KAFKA_STREAMS_CACHE/classpath.txt (default <repo>/.cache/kafka-streams). Prints that file's path.
# Idempotent, like ../fetch.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
cache="${KAFKA_STREAMS_CACHE:-$repo/.cache/kafka-streams}"
mkdir -p "$cache"
cp_file="$cache/classpath.txt"

cached_ok() {
  [ -s "$cp_file" ] && [ "$cp_file" -nt "$here/pom.xml" ] || return 1
  local jar
  while IFS= read -r jar; do [ -f "$jar" ] || return 1; done < <(tr ':' '\n' < "$cp_file")
}

if ! cached_ok; then
  echo "streams/fetch.sh: resolving Kafka Streams jars with Maven (first run downloads ~70 MB, mostly RocksDB)" >&2
  mvn -B -q -Dstyle.color=never -f "$here/pom.xml" dependency:build-classpath -Dmdep.outputFile="$cp_file.tmp" >&2
  mv "$cp_file.tmp" "$cp_file"
fi
echo "$cp_file"
