package dev.annal.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/** Small helpers around the unchanged Java kafka-clients. Consumers use assign() and need no group coordinator. */
final class Clients {
    static final Duration TIMEOUT = Duration.ofSeconds(30);

    private Clients() {}

    static String uniqueTopic(String base) {
        return "itj-" + base + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    static Admin admin(Broker b) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, b.bootstrap());
        return Admin.create(p);
    }

    static void createTopic(Broker b, String name, int partitions, Map<String, String> configs) throws Exception {
        try (Admin admin = admin(b)) {
            admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1).configs(configs)))
                    .all().get(30, TimeUnit.SECONDS);
            waitForLeaders(admin, name, partitions);
        }
    }

    static void waitForLeaders(Admin admin, String name, int partitions) throws Exception {
        long deadline = System.nanoTime() + TIMEOUT.toNanos();
        String last = "";
        while (System.nanoTime() < deadline) {
            try {
                TopicDescription d = admin.describeTopics(List.of(name)).allTopicNames().get(10, TimeUnit.SECONDS)
                        .get(name);
                last = d.toString();
                if (d.partitions().size() == partitions
                        && d.partitions().stream().allMatch(p -> p.leader() != null && p.leader().id() >= 0)) {
                    return;
                }
            } catch (Exception e) {
                last = e.toString();
            }
            Thread.sleep(100);
        }
        throw new AssertionError("topic " + name + " not ready with " + partitions + " partitions: " + last);
    }

    /** A producer with `overrides` on top of the client's defaults (nothing else changed). */
    static KafkaProducer<byte[], byte[]> producer(Broker b, Map<String, Object> overrides) {
        Map<String, Object> c = new HashMap<>();
        c.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, b.bootstrap());
        c.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        c.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        c.putAll(overrides);
        return new KafkaProducer<>(c);
    }

    /** A producer for plain Produce tests: idempotence off, so it does not depend on InitProducerId (issue 6). */
    static KafkaProducer<byte[], byte[]> plainProducer(Broker b, Map<String, Object> overrides) {
        Map<String, Object> c = new HashMap<>();
        c.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false);
        c.putAll(overrides);
        return producer(b, c);
    }

    static KafkaConsumer<byte[], byte[]> consumer(Broker b, Map<String, Object> overrides) {
        Map<String, Object> c = new HashMap<>();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, b.bootstrap());
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.putAll(overrides);
        return new KafkaConsumer<>(c);
    }

    static List<ConsumerRecord<byte[], byte[]>> poll(KafkaConsumer<byte[], byte[]> consumer, int count) {
        List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
        long deadline = System.nanoTime() + TIMEOUT.toNanos();
        while (out.size() < count && System.nanoTime() < deadline) {
            consumer.poll(Duration.ofMillis(200)).forEach(out::add);
        }
        assertEquals(count, out.size(), "records consumed within " + TIMEOUT);
        return out;
    }

    /** Reads `count` records of one partition from `offset` (or from the beginning when offset < 0). */
    static List<ConsumerRecord<byte[], byte[]>> consume(Broker b, String topic, int partition, long offset,
                                                        int count) {
        try (KafkaConsumer<byte[], byte[]> c = consumer(b, Map.of())) {
            TopicPartition tp = new TopicPartition(topic, partition);
            c.assign(Set.of(tp));
            if (offset < 0) {
                c.seekToBeginning(Set.of(tp));
            } else {
                c.seek(tp, offset);
            }
            return poll(c, count);
        }
    }

    static byte[] bytes(String s) {
        return s.getBytes(java.nio.charset.StandardCharsets.UTF_8);
    }

    static String str(byte[] b) {
        return b == null ? null : new String(b, java.nio.charset.StandardCharsets.UTF_8);
    }
}
