#!/usr/bin/env bash
# Resolves the Apache Kafka 4.x broker + tools jars from Maven Central (Maven only, nothing else is downloaded)
# and writes their classpath to $KAFKA_CACHE/classpath.txt. Prints that file's path on stdout.
#   KAFKA_CACHE  where to keep the classpath file (default <repo>/.cache/kafka); jars live in Maven's local repo.
# Idempotent: when the classpath file exists, is newer than the pom and every jar in it exists, it does nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${KAFKA_CACHE:-$repo/.cache/kafka}"
mkdir -p "$cache"
cp_file="$cache/classpath.txt"

cached_ok() {
  [ -s "$cp_file" ] && [ "$cp_file" -nt "$here/pom.xml" ] || return 1
  local jar
  while IFS= read -r jar; do [ -f "$jar" ] || return 1; done < <(tr ':' '\n' < "$cp_file")
}

if ! cached_ok; then
  echo "fetch.sh: resolving Apache Kafka jars with Maven (first run downloads ~100 MB)" >&2
  # -B: no colour codes or progress in logs.
  mvn -B -q -f "$here/pom.xml" dependency:build-classpath -Dmdep.outputFile="$cp_file.tmp" >&2
  mv "$cp_file.tmp" "$cp_file"
fi
echo "$cp_file"
