// Reads a topic from the beginning with Kafka's Java consumer using assign() (no consumer group), and prints
// one summary line. The group-free twin of ConsumerPerformance, for brokers without the consumer-group APIs:
//   java -cp <kafka classpath> bench/java/AssignConsumer.java BOOTSTRAP TOPIC RECORDS IDLE_TIMEOUT_MS
// Output: "assign-consumer: records=N bytes=B seconds=S"  (exit 1 if fewer than RECORDS arrived)
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class AssignConsumer {
    public static void main(String[] args) {
        if (args.length != 4) {
            System.err.println("usage: AssignConsumer BOOTSTRAP TOPIC RECORDS IDLE_TIMEOUT_MS");
            System.exit(2);
        }
        String topic = args[1];
        long want = Long.parseLong(args[2]);
        long idleTimeoutMs = Long.parseLong(args[3]);
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        long records = 0, bytes = 0;
        long start, last;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> parts = new ArrayList<>();
            for (PartitionInfo p : consumer.partitionsFor(topic, Duration.ofSeconds(60)))
                parts.add(new TopicPartition(topic, p.partition()));
            consumer.assign(parts);
            consumer.seekToBeginning(parts);
            start = System.nanoTime();
            last = start;
            long lastData = System.currentTimeMillis();
            while (records < want && System.currentTimeMillis() - lastData < idleTimeoutMs) {
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(500));
                if (batch.isEmpty()) continue;
                lastData = System.currentTimeMillis();
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    records++;
                    if (r.value() != null) bytes += r.value().length;
                }
                last = System.nanoTime();
            }
            // The client's own view of the broker: time per fetch request and bytes per response.
            for (Map.Entry<org.apache.kafka.common.MetricName, ? extends org.apache.kafka.common.Metric> e :
                    consumer.metrics().entrySet()) {
                org.apache.kafka.common.MetricName n = e.getKey();
                if (n.group().equals("consumer-fetch-manager-metrics") && !n.tags().containsKey("topic")
                        && !n.tags().containsKey("partition")
                        && Arrays.asList("fetch-latency-avg", "fetch-latency-max", "fetch-size-avg",
                                         "records-per-request-avg", "fetch-total").contains(n.name()))
                    System.out.printf(Locale.ROOT, "assign-consumer-metric: %s=%s%n", n.name(),
                                      e.getValue().metricValue());
            }
        }
        double seconds = (last - start) / 1e9;
        System.out.printf(Locale.ROOT, "assign-consumer: records=%d bytes=%d seconds=%.3f%n", records, bytes, seconds);
        System.exit(records >= want ? 0 : 1);
    }
}
