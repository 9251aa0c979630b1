"""Annal vs Apache Kafka benchmark harness (see bench/README.md). Standard library only, except report charts."""
