package dev.annal.interop;

import static dev.annal.interop.Clients.bytes;
import static dev.annal.interop.Clients.str;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeProducersResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.utils.Utils;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/** Produce and consume with the unchanged Java kafka-clients 4.x. */
class ProduceConsumeTest {
    static Broker broker;

    @BeforeAll
    static void startBroker() throws Exception {
        broker = Broker.create();
    }

    @AfterAll
    static void stopBroker() throws Exception {
        if (broker != null) {
            broker.close();
        }
    }

    static long recentBase() {
        // Within the default 7-day retention, rounded to the second.
        return (System.currentTimeMillis() / 1000 - 3600) * 1000;
    }

    static Stream<Arguments> codecsAndAcks() {
        List<Arguments> out = new ArrayList<>();
        for (String codec : List.of("none", "gzip", "snappy", "lz4", "zstd")) {
            for (String acks : List.of("0", "1", "all")) {
                out.add(Arguments.of(codec, acks));
            }
        }
        return out.stream();
    }

    @ParameterizedTest(name = "codec={0} acks={1}")
    @MethodSource("codecsAndAcks")
    void produceWithEveryCodecAndAcks(String codec, String acks) throws Exception {
        String topic = Clients.uniqueTopic("codec-" + codec + "-acks-" + acks);
        Clients.createTopic(broker, topic, 1, Map.of());
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        List<String> values = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> p = Clients.plainProducer(broker, Map.of(
                ProducerConfig.COMPRESSION_TYPE_CONFIG, codec, ProducerConfig.ACKS_CONFIG, acks,
                ProducerConfig.LINGER_MS_CONFIG, 20))) {
            for (int i = 0; i < 60; i++) {
                String v = ("value-" + i + "-").repeat(1 + i % 20);
                values.add(v);
                byte[] key = i % 3 == 0 ? null : bytes("key-" + i % 7);
                futures.add(p.send(new ProducerRecord<>(topic, key, bytes(v))));
            }
            p.flush();
        }
        for (int i = 0; i < 60; i++) {
            RecordMetadata md = futures.get(i).get(30, TimeUnit.SECONDS);
            if (!acks.equals("0")) {
                assertEquals(i, md.offset());
            }
        }
        List<ConsumerRecord<byte[], byte[]>> got = Clients.consume(broker, topic, 0, -1, 60);
        for (int i = 0; i < 60; i++) {
            assertEquals(i, got.get(i).offset());
            assertEquals(values.get(i), str(got.get(i).value()));
        }
    }

    @Test
    void keyedRecordsLandInMurmur2Partitions() throws Exception {
        String topic = Clients.uniqueTopic("murmur2");
        Clients.createTopic(broker, topic, 6, Map.of());
        List<byte[]> keys = new ArrayList<>();
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> p = Clients.plainProducer(broker, Map.of())) {
            for (int i = 0; i < 80; i++) {
                byte[] key = bytes("user-" + i);
                keys.add(key);
                futures.add(p.send(new ProducerRecord<>(topic, key, bytes("v-" + i))));
            }
            p.flush();
        }
        Map<Integer, List<String>> expected = new HashMap<>();
        for (int i = 0; i < 80; i++) {
            // Kafka's default partitioner for keyed records.
            int want = Utils.toPositive(Utils.murmur2(keys.get(i))) % 6;
            assertEquals(want, futures.get(i).get().partition(), "partition of key user-" + i);
            expected.computeIfAbsent(want, k -> new ArrayList<>()).add("user-" + i);
        }
        assertEquals(6, expected.size(), "80 keys spread over all 6 partitions");
        for (int p = 0; p < 6; p++) {
            List<String> want = expected.get(p);
            List<String> got = Clients.consume(broker, topic, p, -1, want.size()).stream()
                    .map(r -> str(r.key())).toList();
            assertEquals(want, got, "keys in partition " + p);
        }
    }

    @Test
    void consumeFromEarliestAndLatest() throws Exception {
        String topic = Clients.uniqueTopic("earliest-latest");
        Clients.createTopic(broker, topic, 1, Map.of());
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<byte[], byte[]> p = Clients.plainProducer(broker, Map.of());
             KafkaConsumer<byte[], byte[]> latest = Clients.consumer(broker,
                     Map.of(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "latest"))) {
            for (int i = 0; i < 5; i++) {
                p.send(new ProducerRecord<>(topic, bytes("old-" + i))).get();
            }
            latest.assign(Set.of(tp));
            assertEquals(5, latest.position(tp), "auto.offset.reset=latest starts at the log end");
            for (int i = 0; i < 3; i++) {
                p.send(new ProducerRecord<>(topic, bytes("new-" + i))).get();
            }
            List<ConsumerRecord<byte[], byte[]>> got = Clients.poll(latest, 3);
            assertEquals(List.of(5L, 6L, 7L), got.stream().map(ConsumerRecord::offset).toList());
            assertEquals(List.of("new-0", "new-1", "new-2"), got.stream().map(r -> str(r.value())).toList());

            latest.seekToBeginning(Set.of(tp));
            got = Clients.poll(latest, 8);
            assertEquals("old-0", str(got.get(0).value()));
            assertEquals(0L, got.get(0).offset());
            latest.seekToEnd(Set.of(tp));
            assertEquals(8, latest.position(tp));
        }
    }

    @Test
    void offsetsForTimesAndListOffsets() throws Exception {
        String topic = Clients.uniqueTopic("by-time");
        Clients.createTopic(broker, topic, 1, Map.of());
        TopicPartition tp = new TopicPartition(topic, 0);
        long base = recentBase();
        try (KafkaProducer<byte[], byte[]> p = Clients.plainProducer(broker, Map.of(ProducerConfig.LINGER_MS_CONFIG, 5))) {
            // Out of order at offset 4: the maximum timestamp is not the last record's.
            long[] deltas = {0, 1000, 2000, 3000, 9000, 4000, 5000};
            for (int i = 0; i < deltas.length; i++) {
                p.send(new ProducerRecord<>(topic, 0, base + deltas[i], null, bytes("t-" + i)));
            }
            p.flush();
        }
        try (KafkaConsumer<byte[], byte[]> c = Clients.consumer(broker, Map.of())) {
            OffsetAndTimestamp at = c.offsetsForTimes(Map.of(tp, base + 2500L)).get(tp);
            assertEquals(3, at.offset());
            assertEquals(base + 3000, at.timestamp());
            assertEquals(0, c.offsetsForTimes(Map.of(tp, base - 10_000L)).get(tp).offset());
            // First offset with timestamp >= T: offset 4 (base+9000) precedes offset 6 (base+5000).
            assertEquals(4, c.offsetsForTimes(Map.of(tp, base + 4500L)).get(tp).offset());
            assertNull(c.offsetsForTimes(Map.of(tp, base + 9001L)).get(tp));
            assertEquals(0L, c.beginningOffsets(Set.of(tp)).get(tp));
            assertEquals(7L, c.endOffsets(Set.of(tp)).get(tp));

            c.assign(Set.of(tp));
            c.seek(tp, c.offsetsForTimes(Map.of(tp, base + 4500L)).get(tp).offset());
            ConsumerRecord<byte[], byte[]> r = Clients.poll(c, 3).get(0);
            assertEquals(4, r.offset());
            assertEquals(base + 9000, r.timestamp());
        }
        try (Admin admin = Clients.admin(broker)) {
            ListOffsetsResult.ListOffsetsResultInfo max = admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp()))
                    .partitionResult(tp).get(30, TimeUnit.SECONDS);
            assertEquals(4, max.offset());
            assertEquals(base + 9000, max.timestamp());
            assertEquals(0, admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get().offset());
            assertEquals(7, admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp).get().offset());
        }
    }

    @Test
    void headersAndTimestampsIntact() throws Exception {
        String topic = Clients.uniqueTopic("headers");
        Clients.createTopic(broker, topic, 1, Map.of());
        long base = recentBase();
        List<ProducerRecord<byte[], byte[]>> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> p = Clients.plainProducer(broker, Map.of(ProducerConfig.LINGER_MS_CONFIG, 10))) {
            for (int i = 0; i < 20; i++) {
                byte[] binary = new byte[256];
                for (int j = 0; j < 256; j++) {
                    binary[j] = (byte) (j + i);
                }
                List<Header> headers = List.of(
                        new RecordHeader("trace-id", bytes("abc" + i)), new RecordHeader("dup", bytes("first")),
                        new RecordHeader("dup", bytes("second")), new RecordHeader("empty", new byte[0]),
                        new RecordHeader("null", (byte[]) null), new RecordHeader("bin", binary),
                        new RecordHeader("ünï", bytes("cödé")));
                ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, 0, base + 17L * i, bytes("k" + i),
                        bytes("v" + i), headers);
                sent.add(r);
                p.send(r);
            }
            p.flush();
        }
        List<ConsumerRecord<byte[], byte[]>> got = Clients.consume(broker, topic, 0, -1, 20);
        for (int i = 0; i < 20; i++) {
            ConsumerRecord<byte[], byte[]> g = got.get(i);
            ProducerRecord<byte[], byte[]> s = sent.get(i);
            assertArrayEquals(s.key(), g.key());
            assertArrayEquals(s.value(), g.value());
            assertEquals(s.timestamp().longValue(), g.timestamp());
            assertEquals(TimestampType.CREATE_TIME, g.timestampType());
            Header[] want = s.headers().toArray();
            Header[] have = g.headers().toArray();
            assertEquals(want.length, have.length);
            for (int h = 0; h < want.length; h++) {
                assertEquals(want[h].key(), have[h].key());
                assertArrayEquals(want[h].value(), have[h].value(), "header " + want[h].key());
            }
        }
    }

    @Test
    void logAppendTimeTopic() throws Exception {
        String topic = Clients.uniqueTopic("log-append-time");
        Clients.createTopic(broker, topic, 1, Map.of("message.timestamp.type", "LogAppendTime"));
        long before = System.currentTimeMillis();
        RecordMetadata md;
        try (KafkaProducer<byte[], byte[]> p = Clients.plainProducer(broker, Map.of())) {
            md = p.send(new ProducerRecord<>(topic, 0, 1_000_000L, null, bytes("x"))).get();
        }
        long after = System.currentTimeMillis();
        assertTrue(md.timestamp() >= before - 1000 && md.timestamp() <= after + 1000, "acked log append time");
        ConsumerRecord<byte[], byte[]> r = Clients.consume(broker, topic, 0, -1, 1).get(0);
        assertEquals(TimestampType.LOG_APPEND_TIME, r.timestampType());
        assertEquals(md.timestamp(), r.timestamp());
    }

    @Test
    void fetchStartingInTheMiddleOfABatch() throws Exception {
        String topic = Clients.uniqueTopic("mid-batch");
        Clients.createTopic(broker, topic, 1, Map.of());
        // A long linger and one flush(): the 10 records form one batch (offsets 0..9).
        try (KafkaProducer<byte[], byte[]> p = Clients.plainProducer(broker, Map.of(
                ProducerConfig.LINGER_MS_CONFIG, 5000, ProducerConfig.BATCH_SIZE_CONFIG, 1 << 20))) {
            for (int i = 0; i < 10; i++) {
                p.send(new ProducerRecord<>(topic, bytes("r" + i)));
            }
            p.flush();
            for (int i = 10; i < 15; i++) {
                p.send(new ProducerRecord<>(topic, bytes("r" + i)));
            }
            p.flush();
        }
        List<ConsumerRecord<byte[], byte[]>> got = Clients.consume(broker, topic, 0, 5, 10);
        for (int i = 0; i < 10; i++) {
            assertEquals(5 + i, got.get(i).offset());
            assertEquals("r" + (5 + i), str(got.get(i).value()));
        }
    }

    @Test
    void recordOverTopicMaxMessageBytesIsRejected() throws Exception {
        String topic = Clients.uniqueTopic("too-large");
        Clients.createTopic(broker, topic, 1, Map.of("max.message.bytes", "2000"));
        try (KafkaProducer<byte[], byte[]> p = Clients.plainProducer(broker, Map.of(
                ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 15000, ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000))) {
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> p.send(new ProducerRecord<>(topic, new byte[5000])).get(30, TimeUnit.SECONDS));
            assertInstanceOf(RecordTooLargeException.class, e.getCause());
            assertEquals(0, p.send(new ProducerRecord<>(topic, new byte[500])).get().offset());
        }
    }

    @Test
    void deleteRecordsMovesLogStartAndOutOfRangeResets() throws Exception {
        String topic = Clients.uniqueTopic("delete-records");
        Clients.createTopic(broker, topic, 1, Map.of());
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<byte[], byte[]> p = Clients.plainProducer(broker, Map.of())) {
            for (int i = 0; i < 10; i++) {
                p.send(new ProducerRecord<>(topic, bytes("d" + i)));
            }
            p.flush();
        }
        try (Admin admin = Clients.admin(broker)) {
            long low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(4))).lowWatermarks().get(tp)
                    .get(30, TimeUnit.SECONDS).lowWatermark();
            assertEquals(4, low);
        }
        try (KafkaConsumer<byte[], byte[]> c = Clients.consumer(broker, Map.of())) {
            assertEquals(4L, c.beginningOffsets(Set.of(tp)).get(tp));
            c.assign(Set.of(tp));
            c.seek(tp, 1); // below the log start: OFFSET_OUT_OF_RANGE, then auto.offset.reset=earliest
            List<ConsumerRecord<byte[], byte[]>> got = Clients.poll(c, 6);
            assertEquals(4, got.get(0).offset());
            assertEquals("d4", str(got.get(0).value()));
        }
    }

    /** Issue 6: the Java producer's defaults (enable.idempotence=true, acks=all) must work, exactly once, in order. */
    @Test
    @Tag("idempotence")
    void defaultProducerIsIdempotentAndEveryRecordArrivesExactlyOnceInOrder() throws Exception {
        String topic = Clients.uniqueTopic("default-producer");
        Clients.createTopic(broker, topic, 3, Map.of());
        int n = 3000;
        Map<Integer, List<String>> sentByPartition = new HashMap<>();
        try (KafkaProducer<byte[], byte[]> p = Clients.producer(broker, Map.of())) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                futures.add(p.send(new ProducerRecord<>(topic, i % 3, null, bytes("seq-" + i))));
            }
            p.flush();
            for (int i = 0; i < n; i++) {
                RecordMetadata md = futures.get(i).get(30, TimeUnit.SECONDS);
                assertEquals(i / 3, md.offset(), "offset of record " + i);
                sentByPartition.computeIfAbsent(md.partition(), k -> new ArrayList<>()).add("seq-" + i);
            }
        }
        for (int part = 0; part < 3; part++) {
            List<String> want = sentByPartition.get(part);
            List<String> got = Clients.consume(broker, topic, part, -1, want.size()).stream()
                    .map(r -> str(r.value())).toList();
            assertEquals(want, got, "partition " + part + ": every record once, in order");
            try (KafkaConsumer<byte[], byte[]> c = Clients.consumer(broker, Map.of())) {
                TopicPartition tp = new TopicPartition(topic, part);
                assertEquals((long) want.size(), c.endOffsets(Set.of(tp)).get(tp), "no extra records");
            }
        }
        // The broker tracked the producer's sequence numbers: one idempotent producer per partition.
        try (Admin admin = Clients.admin(broker)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            DescribeProducersResult.PartitionProducerState state = admin.describeProducers(List.of(tp))
                    .partitionResult(tp).get(30, TimeUnit.SECONDS);
            List<ProducerState> active = state.activeProducers();
            assertEquals(1, active.size(), active.toString());
            assertTrue(active.get(0).producerId() >= 0);
            assertEquals(n / 3 - 1, active.get(0).lastSequence());
        }
    }
}
